"""headprune.evaluation.lm_tasks: an lm-evaluation-harness task scored for many gate settings at once gives,
item by item, what lm-eval's own simple_evaluate with its own HFLM gives for the model under each setting."""
import json
import random

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from headprune.evaluation.lm_tasks import TaskError, aggregate, evaluate_variants, item_metrics, load_task
from headprune.models.heads import Streaming, adapter_for, full_gates, gated
from headprune.models.masking import masked_as

lm_eval = pytest.importorskip("lm_eval")

WORDS = ("the a cat dog bird fish sees eats likes runs big small red blue old new tree house river hill and "
         "then one two three").split()
LLAMA_LAYERS = 3
ONE_TOKEN_ANSWERS = ("tree", "blue", "cat", "dog")  # each one token after a space, in both tokenizers


# --- a tiny language, its tokenizers and models --------------------------------------------------------


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def corpus() -> list[str]:
    """Texts of the tiny language: sentences, and questions answered the way the tasks below ask them."""
    rng = random.Random(1)
    sentences = [sentence(rng, rng.randint(3, 12)) + rng.choice([".", ".", "?", ""]) for _ in range(300)]
    answers = [f"Q: {sentence(rng, rng.randint(3, 7))}\nA: {rng.choice(WORDS)}" for _ in range(100)]
    questions = [f"Question: {sentence(rng, rng.randint(4, 9))}\nAnswer: {sentence(rng, rng.randint(1, 4))}"
                 for _ in range(100)]
    return sentences + answers + questions


def llama_tokenizer():
    """Llama's kind: a byte-level BPE that puts <s> before every text; </s> and <pad> its other specials."""
    from headprune.demo.models import tiny_llama_tokenizer

    return tiny_llama_tokenizer("\n".join(corpus()), 400)


def gpt2_tokenizer():
    """GPT-2's kind: no BOS added, <|endoftext|> is its BOS, EOS and unknown token, no pad token."""
    from headprune.demo.models import _byte_level_bpe

    bpe = _byte_level_bpe(corpus(), 400, ["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def trained(model, tokenizer, steps=150, window=32):
    """A few steps on the tiny language (each text ending in EOS), so that greedy answers are words that end
    in a newline, a stop string or EOS, and choices differ in more than noise."""
    ids = [token for text in corpus() for token in tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]]
    chunks = torch.tensor(ids[:len(ids) // window * window]).view(-1, window)
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        batch = chunks[torch.randint(len(chunks), (16,))]
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def tiny_llama(tokenizer, positions=36):
    """6 query heads on 2 key/value heads (groups of 3), tied input and output embeddings."""
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=24, intermediate_size=32,
                         num_hidden_layers=LLAMA_LAYERS, num_attention_heads=6, num_key_value_heads=2, head_dim=4,
                         max_position_embeddings=positions, tie_word_embeddings=True, initializer_range=0.1,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, attn_implementation="eager")
    torch.manual_seed(0)
    return trained(LlamaForCausalLM(config), tokenizer)


def tiny_gpt2(tokenizer):
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=16, n_layer=2, n_head=4, n_positions=32,
                        initializer_range=0.1, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        attn_implementation="eager")
    torch.manual_seed(0)
    return trained(GPT2LMHeadModel(config), tokenizer)


@pytest.fixture(scope="module")
def llama():
    tokenizer = llama_tokenizer()
    return tiny_llama(tokenizer), tokenizer


@pytest.fixture(scope="module")
def gpt2():
    tokenizer = gpt2_tokenizer()
    return tiny_gpt2(tokenizer), tokenizer


def gates_off(model, heads, value=0.0):
    gates = full_gates(model)
    (attn_type,) = gates
    for layer, head in heads:
        gates[attn_type][layer, head] = value
    return gates


# --- tasks in lm-eval's YAML format, on local files ----------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def data_files(folder, name, test, train=None):
    files = {"test": str(write_jsonl(folder / f"{name}.jsonl", test))}
    if train is not None:
        files["train"] = str(write_jsonl(folder / f"{name}_train.jsonl", train))
    return {"data_files": files}


def write_task(folder, name, **config):
    """A task YAML (JSON is YAML) with local data files."""
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps({"task": name, "dataset_path": "json", "test_split": "test", **config}, indent=1))
    return path


def mean_metric(name, higher=True):
    return {"metric": name, "aggregation": "mean", "higher_is_better": higher}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return make_tasks(tmp_path_factory.mktemp("lm_tasks"))


def make_tasks(folder):
    """Task YAMLs of every output type, by kind: multiple choice (with a training split for few-shot examples),
    LAMBADA-style last words, rolling log-likelihoods of texts longer than the models' positions, and short
    answers generated until a stop string."""
    rng = random.Random(2)

    def mc_doc():
        # choices of different lengths, two starting alike (a shared prefix beyond the context), one a single word
        first = sentence(rng, 2)
        return {"question": sentence(rng, rng.randint(4, 9)),
                "choices": [first + " " + sentence(rng, 2), first, rng.choice(WORDS), sentence(rng, 3)],
                "label": rng.randrange(4)}

    def generation_doc():
        # a question answered by a word and EOS, or a sentence to go on with until its end or the token budget
        if rng.random() < 0.5:
            return {"prompt": f"Q: {sentence(rng, rng.randint(3, 7))}\nA:",
                    "answer": " " + rng.choice(["tree", "blue"])}
        return {"prompt": sentence(rng, rng.randint(2, 4)), "answer": " " + sentence(rng, 2) + "."}

    mc = write_task(folder, "tiny_mc", output_type="multiple_choice", tag="tiny_tag", training_split="train",
                    fewshot_split="train",
                    dataset_kwargs=data_files(folder, "mc", [mc_doc() for _ in range(6)], [mc_doc() for _ in range(6)]),
                    doc_to_text="Question: {{question}}\nAnswer:", doc_to_choice="{{choices}}", doc_to_target="label",
                    metric_list=[mean_metric("acc"), mean_metric("acc_norm")])
    # one-token answers (as MMLU's letters), and their unconditional log-likelihoods (acc_mutual_info)
    one_token = write_task(folder, "tiny_mc1", output_type="multiple_choice", tag="tiny_tag",
                           dataset_kwargs=data_files(folder, "mc1", [{"question": sentence(rng, rng.randint(4, 9)),
                                                                      "label": rng.randrange(4)} for _ in range(6)]),
                           doc_to_text="Question: {{question}}\nAnswer:", doc_to_choice=list(ONE_TOKEN_ANSWERS),
                           doc_to_target="label",
                           metric_list=[mean_metric("acc"), mean_metric("acc_norm"), mean_metric("acc_mutual_info")])
    lambada = write_task(folder, "tiny_lambada", output_type="loglikelihood",
                         dataset_kwargs=data_files(folder, "lambada",
                                                   [{"text": sentence(rng, rng.randint(4, 10))} for _ in range(6)]),
                         doc_to_text="{{text.split(' ')[:-1]|join(' ')}}", doc_to_target="{{' '+text.split(' ')[-1]}}",
                         metric_list=[{"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
                                      mean_metric("acc")])
    # texts longer than the models' positions: several rolling windows each
    rolling = write_task(folder, "tiny_rolling", output_type="loglikelihood_rolling",
                         dataset_kwargs=data_files(folder, "rolling",
                                                   [{"text": " ".join(sentence(rng, 9) + "." for _ in range(n))}
                                                    for n in (1, 4, 9, 2)]),
                         doc_to_text="", doc_to_target="{{text}}",
                         metric_list=[{"metric": m, "aggregation": a, "higher_is_better": False} for m, a in
                                      [("word_perplexity", "weighted_perplexity"),
                                       ("byte_perplexity", "weighted_perplexity"), ("bits_per_byte", "bits_per_byte")]])
    generation = write_task(folder, "tiny_generation", output_type="generate_until", training_split="train",
                            fewshot_split="train",
                            dataset_kwargs=data_files(folder, "generation", [generation_doc() for _ in range(8)],
                                                      [generation_doc() for _ in range(4)]),
                            doc_to_text="{{prompt}}", doc_to_target="{{answer}}", target_delimiter="",
                            generation_kwargs={"until": ["\n", ".", "?"], "do_sample": False, "max_gen_toks": 6},
                            metric_list=[{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                                          "ignore_case": True, "ignore_punctuation": True}])
    # a group scored as MMLU is (its tasks' accuracies weighted by their sizes), one not (unweighted), one mixed
    (folder / "tiny_mc_group.yaml").write_text(json.dumps(
        {"group": "tiny_mc_group", "task": ["tiny_mc", "tiny_mc1"],
         "aggregate_metric_list": [{"metric": "acc", "weight_by_size": True},
                                   {"metric": "acc_norm", "weight_by_size": False}]}))
    (folder / "tiny_mixed_group.yaml").write_text(json.dumps({"group": "tiny_mixed_group",
                                                               "task": ["tiny_mc", "tiny_lambada"]}))
    return {"mc": mc, "mc1": one_token, "lambada": lambada, "rolling": rolling, "generation": generation}


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny models gain nothing from threads, and on a shared machine several threads per test wait on
    each other (the file ran 10x slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path_factory):
    """Nothing reaches a hub; datasets caches in a folder of the test session's. simple_evaluate's report of
    the environment (``pip list`` in a subprocess, 5 s a call) is left out of its results."""
    import lm_eval.evaluator

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path_factory.getbasetemp() / "hf_datasets"))
    monkeypatch.setattr(lm_eval.evaluator, "add_env_info", lambda results: None)


# --- the reference: lm-eval's simple_evaluate with its own HFLM, one gate setting at a time ---------------


def reference(model, tokenizer, path, gates, masking, num_fewshot=None, limit=None):
    """simple_evaluate's logged samples, by doc_id, for the model under one gate setting."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    with gated(model, gates, masking=masking):
        results = simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=3),
                                  tasks=[str(path)], task_manager=TaskManager(include_path=str(path.parent),
                                                                              include_defaults=False),
                                  log_samples=True, num_fewshot=num_fewshot, limit=limit, bootstrap_iters=0)
    (samples,) = results["samples"].values()
    return sorted(samples, key=lambda sample: sample["doc_id"])


def assert_same(mine, theirs, what):
    """A response or metric value: numbers within 1e-4 (booleans and strings exactly), pairs element by element."""
    if isinstance(theirs, (list, tuple)):
        assert len(mine) == len(theirs), what
        for k, (a, b) in enumerate(zip(mine, theirs)):
            assert_same(a, b, f"{what}[{k}]")
    elif isinstance(theirs, (bool, str)) or theirs is None:
        assert mine == theirs, what
    else:
        assert abs(float(mine) - float(theirs)) <= 1e-4, f"{what}: {mine} != {theirs}"


def check_against_simple_evaluate(model, tokenizer, path, settings, masking, num_fewshot=None, limit=None):
    """Every gate setting's responses, per-item metrics and aggregate equal simple_evaluate's."""
    task = load_task(str(path), num_fewshot=num_fewshot, limit=limit)
    # batches of 9 rows: two questions' choices (and their contexts, of different lengths) go together
    with masked_as(model, masking):
        responses = evaluate_variants(model, tokenizer, task, settings, batch_size=9, variant_batch_size=64,
                                      progress=False)
    json.dumps(responses)  # the pipeline stores them
    assert len(responses) == len(settings)
    distinct = set()
    for k, (gates, per_doc) in enumerate(zip(settings, responses)):
        samples = reference(model, tokenizer, path, gates, masking, num_fewshot, limit)
        assert len(samples) == len(task.docs) == len(per_doc)
        metrics = item_metrics(task, per_doc)
        for doc, sample, mine, instances, doc_metrics in zip(task.docs, samples, per_doc, task.requests, metrics):
            where = f"{path.stem} setting {k} ({masking}) doc {sample['doc_id']}"
            assert [instance.args for instance in instances] == [tuple(a) for a in sample["arguments"]], where
            assert_same(mine, sample["filtered_resps"], f"{where} responses")
            assert set(doc_metrics) == set(sample["metrics"]), where
            for name in sample["metrics"]:
                assert_same(doc_metrics[name], sample[name], f"{where} {name}")
        for name in task.metrics:
            theirs = task.tasks[0].aggregation()[name]([sample[name] for sample in samples])
            assert abs(aggregate(task, name, metrics) - theirs) <= 1e-4 * max(1.0, abs(theirs))
        distinct.add(json.dumps(per_doc))
    return distinct


# --- tests ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_fewshot", [0, 2])
def test_multiple_choice_equals_simple_evaluate_on_a_grouped_query_llama(llama, tasks, num_fewshot):
    model, tokenizer = llama
    # heads in different layers, a whole key/value group (heads 3-5 read kv head 1), the full model
    settings = [None, gates_off(model, [(1, 2)]), gates_off(model, [(0, 3), (0, 4), (0, 5)]),
                gates_off(model, [(2, 0), (1, 5)])]
    distinct = check_against_simple_evaluate(model, tokenizer, tasks["mc"], settings, "zero", num_fewshot=num_fewshot)
    assert len(distinct) == len(settings)  # each setting changed the responses


@pytest.mark.parametrize("kind, num_fewshot", [("mc", 0), ("mc", 2), ("generation", 2)])
@pytest.mark.parametrize("masking", ["uniform", Streaming(sink=1, recent=3)], ids=["uniform", "streaming"])
def test_other_maskings_equal_simple_evaluate(llama, tasks, masking, kind, num_fewshot):
    model, tokenizer = llama
    settings = [gates_off(model, [(1, 2), (1, 4)]), gates_off(model, [(0, 0), (0, 1), (0, 2)])]
    distinct = check_against_simple_evaluate(model, tokenizer, tasks[kind], settings, masking, num_fewshot=num_fewshot)
    assert len(distinct) == len(settings) or kind == "generation"


@pytest.mark.parametrize("kind", ["mc1", "lambada", "rolling", "generation"])
def test_other_output_types_equal_simple_evaluate_on_llama(llama, tasks, kind):
    model, tokenizer = llama
    settings = [None, gates_off(model, [(0, 1)]), gates_off(model, [(2, 3), (2, 4), (2, 5)])]
    check_against_simple_evaluate(model, tokenizer, tasks[kind], settings, "zero",
                                  num_fewshot=2 if kind == "generation" else None)


@pytest.mark.parametrize("kind", ["mc", "mc1", "lambada", "rolling", "generation"])
def test_every_output_type_equals_simple_evaluate_on_gpt2(gpt2, tasks, kind):
    model, tokenizer = gpt2
    settings = [None, gates_off(model, [(0, 1), (1, 3)])]
    check_against_simple_evaluate(model, tokenizer, tasks[kind], settings, "zero", num_fewshot=1, limit=5)


# --- the sharing: what the layers below the first masked one compute, counted ----------------------------


def tokens_per_layer(model, run):
    """What ``run()`` puts through each layer's query projection: (rows, tokens) per layer."""
    counts = {}
    handles = []
    for site in adapter_for(model).sites(model):
        def count(module, args, output, layer=site.layer):
            rows, tokens = counts.get(layer, (0, 0))
            counts[layer] = (rows + args[0].shape[0], tokens + args[0].shape[0] * args[0].shape[1])
        handles.append(site.query.register_forward_hook(count))
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return counts


def test_one_token_answers_read_one_row_computed_once_for_every_setting_below_its_first_masked_layer(llama, tasks):
    model, tokenizer = llama
    for answer in ONE_TOKEN_ANSWERS:
        assert len(tokenizer(" " + answer, add_special_tokens=False)["input_ids"]) == 1
    task = load_task(str(tasks["mc1"]))
    settings = [None, gates_off(model, [(1, 0)]), gates_off(model, [(1, 3), (1, 4), (1, 5)]),
                gates_off(model, [(2, 2)])]

    def run():
        evaluate_variants(model, tokenizer, task, settings, batch_size=4, variant_batch_size=64, progress=False)

    counts = tokens_per_layer(model, run)
    # each question's four answers read the question once; the four unconditional answers (acc_mutual_info)
    # all read the prefix token: one row more
    assert len(task.docs) == 6 and all(len(requests) == 8 for requests in task.requests)
    assert counts[0][0] == len(task.docs) + 1
    # layer 0 only in the full model's pass; layer 1 too (the layer-1 settings replay its head outputs);
    # layer 2 in the full model's pass and for the two settings first masked in layer 1
    assert counts[1] == counts[0]
    assert counts[2] == (3 * counts[0][0], 3 * counts[0][1])


def test_a_question_is_computed_once_for_all_its_choices_and_below_the_first_masked_layer_once_for_all_settings(
        llama, tasks):
    model, tokenizer = llama
    task = load_task(str(tasks["mc"]), num_fewshot=0)  # short enough not to be truncated: the choices share it
    masked_below = [gates_off(model, [(layer, head)]) for layer in (1, 2) for head in range(6)]

    def layer0_tokens(settings):
        run = lambda: evaluate_variants(model, tokenizer, task, settings, batch_size=8, variant_batch_size=64,
                                        progress=False)
        return tokens_per_layer(model, run)[0][1]

    alone = layer0_tokens([None])
    # a setting first masked above layer 0 adds nothing there: the questions and their choices' own tokens go
    # through it once, in the full model's passes; HFLM reads each choice's question again, for each setting
    assert layer0_tokens([None, *masked_below]) == alone
    whole = sum(len(tokenizer(instance.args[0] + instance.args[1])["input_ids"]) - 1
                for requests in task.requests for instance in requests)
    assert alone < whole
    # in layer 1 the settings first masked there replay its head outputs too; those of layer 2 replay layer 1
    run = lambda: evaluate_variants(model, tokenizer, task, [None, *masked_below], batch_size=8, variant_batch_size=64,
                                    progress=False)
    counts = tokens_per_layer(model, run)
    assert counts[1] == counts[0]


# --- bad input -----------------------------------------------------------------------------------------


def test_tasks_by_name_and_an_unknown_task_a_tag_or_a_mixed_group_is_a_task_error_naming_it(tasks):
    folder = tasks["mc"].parent  # searched besides lm-eval's own tasks (indexing those takes 10-40 s, once)
    with pytest.raises(TaskError, match="no_such_task_xyz.*unknown"):
        load_task("no_such_task_xyz", include_path=folder)
    with pytest.raises(TaskError, match="tiny_mixed_group.*mixes output types"):
        load_task("tiny_mixed_group", include_path=folder)
    with pytest.raises(TaskError, match="tiny_tag.*a tag.*tiny_mc, tiny_mc1"):
        load_task("tiny_tag", include_path=folder)
    assert load_task("tiny_mc", include_path=folder, limit=2).name == "tiny_mc"
    with pytest.raises(TaskError, match="nowhere.yaml.*no such task YAML"):
        load_task("/nowhere/nowhere.yaml")


def test_a_group_scored_by_its_size_weighted_accuracy_equals_simple_evaluate(llama, tasks):
    """A group as MMLU: its tasks' documents one after the other, each scored by its own task, and the group's
    accuracy the mean over all of them (lm-eval weighs its tasks by size); an unweighted metric is refused."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    model, tokenizer = llama
    folder = tasks["mc"].parent
    task = load_task("tiny_mc_group", include_path=folder, num_fewshot=1, limit=4)
    assert task.name == "tiny_mc_group" and task.output_type == "multiple_choice"
    assert task.metrics == ["acc"] and task.higher_is_better("acc")
    with pytest.raises(TaskError, match="group 'tiny_mc_group'.*'acc_norm'"):
        task.check_metric("acc_norm")
    settings = [None, gates_off(model, [(1, 3)])]
    responses = evaluate_variants(model, tokenizer, task, settings, batch_size=4, variant_batch_size=64,
                                  progress=False)
    for gates, per_doc in zip(settings, responses):
        with gated(model, gates):
            results = simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=3),
                                      tasks=["tiny_mc_group"],
                                      task_manager=TaskManager(include_path=str(folder), include_defaults=False),
                                      log_samples=True, num_fewshot=1, limit=4, bootstrap_iters=0)
        samples = [sample for name in ("tiny_mc", "tiny_mc1")
                   for sample in sorted(results["samples"][name], key=lambda sample: sample["doc_id"])]
        metrics = item_metrics(task, per_doc)
        assert len(samples) == len(metrics) == 8
        for mine, sample in zip(metrics, samples):
            assert set(mine) == set(sample["metrics"])
            for name in sample["metrics"]:
                assert_same(mine[name], sample[name], name)
        assert abs(aggregate(task, "acc", metrics) - results["results"]["tiny_mc_group"]["acc,none"]) <= 1e-9


def test_unreadable_data_an_unsupported_output_type_and_sampling_are_task_errors(tmp_path):
    missing = write_task(tmp_path, "missing_data", output_type="multiple_choice",
                         dataset_kwargs={"data_files": {"test": str(tmp_path / "absent.jsonl")}},
                         doc_to_text="{{question}}", doc_to_choice="{{choices}}", doc_to_target="label")
    with pytest.raises(TaskError, match="missing_data.*data cannot be read.*absent.jsonl"):
        load_task(str(missing))
    data = {"data_files": {"test": str(write_jsonl(tmp_path / "data.jsonl", [{"question": "a b", "answer": "c"}]))}}
    ranking = write_task(tmp_path, "ranking_task", output_type="ranking", dataset_kwargs=data,
                         doc_to_text="{{question}}", doc_to_target="{{answer}}")
    with pytest.raises(TaskError, match="ranking_task"):
        load_task(str(ranking))
    sampled = write_task(tmp_path, "sampled_task", output_type="generate_until", dataset_kwargs=data,
                         doc_to_text="{{question}}", doc_to_target="{{answer}}",
                         generation_kwargs={"until": ["\n"], "do_sample": True, "temperature": 0.7})
    with pytest.raises(TaskError, match="sampled_task.*only greedy"):
        load_task(str(sampled))
    greedy = write_task(tmp_path, "greedy_task", output_type="generate_until", dataset_kwargs=data,
                        doc_to_text="{{question}}", doc_to_target="{{answer}}", generation_kwargs={"until": ["\n"]})
    assert load_task(str(greedy)).output_type == "generate_until"


def test_a_metric_the_task_does_not_produce_is_a_task_error_naming_both(tasks):
    task = load_task(str(tasks["lambada"]))
    assert task.metrics == ["perplexity", "acc"]
    assert task.check_metric("acc,none") == "acc"
    assert task.higher_is_better("acc") and not task.higher_is_better("perplexity")
    with pytest.raises(TaskError, match="tiny_lambada.*'exact_match'.*perplexity, acc"):
        task.check_metric("exact_match")
    with pytest.raises(TaskError, match="tiny_lambada"):
        aggregate(task, "f1", [])


@pytest.mark.parametrize("kind, num_fewshot", [("mc", 0), ("generation", 2)])
@pytest.mark.parametrize("word", ["mean", "resample"])
def test_a_head_replaced_by_a_constant_or_a_donor_equals_simple_evaluate(llama, tasks, word, kind, num_fewshot):
    """Mean masking (its layer's head outputs replayed from the full model's pass, the constant put in) and
    resample masking (a donor token's outputs by position), each setting against lm-eval's own HFLM."""
    from headprune.models.masking import Mean, Resample
    from headprune.scoring.constants import mean_constants, resample_pool

    model, tokenizer = llama
    ids = torch.tensor([tokenizer(text)["input_ids"][:12] for text in corpus()[:40] if len(tokenizer(text)["input_ids"]) >= 12])
    train = [{"input_ids": ids[i:i + 8], "attention_mask": torch.ones_like(ids[i:i + 8])} for i in range(0, len(ids), 8)]
    masking = (Mean(mean_constants(model, train, progress=False)) if word == "mean" else
               Resample(resample_pool(model, train, progress=False), seed=1, draw=0))
    settings = [None, gates_off(model, [(1, 2), (1, 4)]), gates_off(model, [(0, 0), (0, 1), (0, 2)])]
    distinct = check_against_simple_evaluate(model, tokenizer, tasks[kind], settings, masking, num_fewshot=num_fewshot)
    assert len(distinct) == len(settings) or kind == "generation"


def test_a_tasks_rows_are_sized_by_its_longest_request_as_hflm_reads_it(llama, tasks, monkeypatch):
    """Memory (issue #57): an lm-eval task's batches are sized by its longest request, counted here with the
    tokenizer itself (context + continuation, less the token never read; a prompt and its token budget), cut to
    the model's positions as HFLM cuts them; few-shot contexts give longer rows and so fewer rows a pass."""
    from headprune.evaluation.evalset import EvalSet
    from headprune.evaluation.lm_tasks import longest_row
    from headprune.evaluation.runs import EvalSettings, rows_that_fit
    from headprune.models import memory

    positioned, tokenizer = llama  # 36 positions
    config = positioned.config.to_dict() | {"max_position_embeddings": 512}
    long = LlamaForCausalLM(type(positioned.config).from_dict(config)).eval()

    def counted(task, positions):
        requests = [request for per_doc in task.requests for request in per_doc]
        if task.output_type == "generate_until":
            tokens = [len(tokenizer(context)["input_ids"]) + options["max_gen_toks"] for context, options in
                      (request.args for request in requests)]
        else:
            tokens = [len(tokenizer("".join(request.args))["input_ids"]) - 1 for request in requests]
        return min(max(tokens), positions)

    for kind, shots in (("mc", 0), ("mc", 2), ("lambada", 0), ("generation", 0), ("generation", 2)):
        task = load_task(str(tasks[kind]), num_fewshot=shots)
        for model, positions in ((long, 512), (positioned, 36)):
            assert longest_row(model, tokenizer, task) == counted(task, positions), (kind, shots, positions)
    rolling = load_task(str(tasks["rolling"]))  # texts longer than 36 positions: windows of 36
    assert longest_row(positioned, tokenizer, rolling) == 36 < longest_row(long, tokenizer, rolling)

    zero, two = (load_task(str(tasks["mc"]), num_fewshot=shots) for shots in (0, 2))
    assert longest_row(long, tokenizer, two) > 2 * longest_row(long, tokenizer, zero)
    # a job with room for about 40 rows of the 2-shot task's length, beside the 1 GB it holds
    monkeypatch.setattr(memory, "host_rss", lambda: 1 << 30)
    row = memory.row_bytes(long, longest_row(long, tokenizer, two))
    mem_mb = ((1 << 30) + memory.fixed_bytes() + 40 * row) >> 20
    memory.limit_job_to(mem_mb)
    try:
        rows = [rows_that_fit(long, tokenizer, EvalSet("lm_eval", [0], [{}], "acc", task=task),
                              EvalSettings()).variant_batch_size for task in (zero, two)]
    finally:
        memory.limit_job_to(None)
    assert rows[1] == ((mem_mb << 20) - (1 << 30) - memory.fixed_bytes()) // row and rows[0] > 2 * rows[1]
