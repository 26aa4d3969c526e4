"""Long-context retrieval (needle in a haystack): items with the needle where the depth says, prompts that
keep the context's token ids, answers of batched gate variants sharing the prompt's layers and KV cache
equal to generate() run on each setting alone, the scores, and the kind through runs.py."""
import contextlib
import json
import random
import re

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from conftest import _spread_weights, needs_exact_decoding, on_test_device
from test_adapter_contract import _random_biases
from headprune.data.retrieval import make_items, read_items, write_items
from headprune.evaluation.retrieval import (answer_variants, generate_variants, paired_bootstrap_retrieval,
                                             retrieval_accuracy, rouge1_recall, stop_token_ids, value_found)
from headprune.evaluation.runs import gates_without
from headprune.models.heads import adapter_for, gated
from headprune.models.masking import masked_as

ENDS = (".", "!", "?", "\n")
WORDS = ("the river old fox saw a bright house near green hills where people walk slowly every morning and "
         "birds sing over quiet fields while children read books about distant stars").split()


def haystack(sentences=60, seed=3):
    """Sentences of random words ending in '.', '!' or '?', some followed by a newline."""
    rng = random.Random(seed)
    parts = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 9))]
        parts.append(" ".join(words).capitalize() + rng.choice(".!?") + rng.choice([" ", " ", " ", "\n"]))
    return "".join(parts)


HAYSTACK = haystack()
QUESTION = "What is the special magic number mentioned in the text?"


class ToyTokenizer:
    """One id per word, punctuation mark or newline (ids given in order of first sight), a BOS first."""

    bos_token_id, eos_token_id, chat_template = 0, 1, None

    def __init__(self):
        self.vocab = {"<s>": 0, "</s>": 1}

    def encode(self, text, add_special_tokens=True):
        ids = [self.vocab.setdefault(token, len(self.vocab)) for token in re.findall(r"\w+|[^\w\s]|\n", text)]
        return [self.bos_token_id] + ids if add_special_tokens else ids

    def decode(self, ids, skip_special_tokens=False):
        words = {i: w for w, i in self.vocab.items()}
        return " ".join(words[i] for i in ids if not (skip_special_tokens and i < 2))


CHATML = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def bpe_tokenizer(bos=True, chat=True):
    """A byte-level BPE (as GPT-2's: " The" is not "The") trained here on the haystack, with a BOS added by
    default and a ChatML template, or neither."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([HAYSTACK, "The special magic number is 12345.", QUESTION, "user assistant"], trainer)
    if bos:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 0)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>" if bos else None, eos_token="</s>",
                                   pad_token="<pad>", extra_special_tokens=["<|im_start|>", "<|im_end|>"],
                                   clean_up_tokenization_spaces=False)
    if chat:
        fast.chat_template = CHATML
    return fast


def metaspace_tokenizer():
    """SentencePiece's way (Llama 2, Mistral v1): words start with "▁", a text gets one before it by itself,
    a BOS by default, no chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator([HAYSTACK, "The special magic number is 0123456789.", QUESTION], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   clean_up_tokenization_spaces=False)


# --- items ---------------------------------------------------------------------------------------


def expected_needle_start(tokenizer, hay, depth):
    """Independently: the last position q <= p = round(depth% of the haystack tokens) right after a token whose
    text ends a sentence; the end of the context when p is there; p when there is none."""
    p = round(depth / 100 * len(hay))
    if p == len(hay):
        return p
    after_an_end = [q for q in range(1, p + 1) if tokenizer.decode([hay[q - 1]]).endswith(ENDS)]
    return after_an_end[-1] if after_an_end else p


def contains_cyclically(haystack_ids, part):
    doubled = haystack_ids + haystack_ids
    return any(doubled[k:k + len(part)] == part for k in range(len(haystack_ids)))


@pytest.mark.parametrize("make_tokenizer, spaced", [(ToyTokenizer, False), (bpe_tokenizer, True),
                                                    (lambda: bpe_tokenizer(bos=False, chat=False), True),
                                                    (metaspace_tokenizer, False)],
                         ids=["toy", "bpe-chat", "bpe-no-bos", "metaspace"])
def test_needle_sits_at_the_stated_depth_and_the_context_keeps_its_ids(make_tokenizer, spaced):
    """``spaced``: the tokenizer tells " The" from "The", and the needle is tokenized after a space."""
    tokenizer = make_tokenizer()
    depths = [0, 10, 25, 50, 75, 90, 100]
    items = make_items(tokenizer, HAYSTACK, context_lengths=[40, 64], depths=depths, needles_per_setting=3, seed=1)
    assert len(items) == 2 * len(depths) * 3 and len({item["id"] for item in items}) == len(items)
    haystack_ids = tokenizer.encode(HAYSTACK, add_special_tokens=False)
    for item in items:
        prompt = item["prompt_ids"]
        start, end = item["context_span"]
        context = prompt[start:end]
        needle_start, needle_end = item["needle_span"]
        needle_ids = prompt[needle_start:needle_end]
        assert end - start == item["context_length"] and needle_start - start == item["needle_start"]
        assert re.fullmatch(r"[1-9]\d{4}", item["value"])
        assert item["needle"] == f"The special magic number is {item['value']}."
        assert needle_ids == tokenizer.encode((" " if spaced else "") + item["needle"], add_special_tokens=False)
        if not isinstance(tokenizer, ToyTokenizer):  # (whose decode puts a space between any two tokens)
            assert tokenizer.decode(needle_ids) == (" " if spaced else "") + item["needle"]
        hay = context[:item["needle_start"]] + context[item["needle_start"] + len(needle_ids):]
        assert len(hay) == item["context_length"] - len(needle_ids) and contains_cyclically(haystack_ids, hay)
        assert item["needle_start"] == expected_needle_start(tokenizer, hay, item["depth"])
        if item["depth"] == 0:
            assert item["needle_start"] == 0
        if item["depth"] == 100:
            assert item["needle_start"] + len(needle_ids) == item["context_length"]  # last
    # the items of one setting read the haystack from different offsets
    firsts = [tuple(item["prompt_ids"][slice(*item["context_span"])][-5:]) for item in items if item["depth"] == 0]
    assert len(set(firsts)) == len(firsts)


def test_the_prompt_is_the_template_around_the_context_and_the_question():
    chat = bpe_tokenizer()
    item = make_items(chat, HAYSTACK, context_lengths=[48], depths=[50], seed=0)[0]
    prompt, (start, end) = item["prompt_ids"], item["context_span"]
    context_text = chat.decode(prompt[start:end])
    rendered = chat.apply_chat_template([{"role": "user", "content": context_text + "\n\n" + QUESTION}],
                                        add_generation_prompt=True, tokenize=False)
    assert chat.decode(prompt) == rendered
    assert prompt[0] == chat.bos_token_id and prompt.count(chat.bos_token_id) == 1  # one BOS, not two
    with_prefix = make_items(chat, HAYSTACK, context_lengths=[48], depths=[50], seed=0,
                             answer_prefix="The number is")[0]
    assert chat.decode(with_prefix["prompt_ids"]) == rendered + "The number is"
    assert with_prefix["prompt_ids"][:end] == prompt[:end]
    plain = make_items(chat, HAYSTACK, context_lengths=[48], depths=[50], seed=0, chat_template=False)[0]
    assert plain["prompt_ids"][0] == chat.bos_token_id and plain["context_span"] == [1, 49]
    assert chat.decode(plain["prompt_ids"], skip_special_tokens=True) == context_text + "\n" + QUESTION + "\n"
    no_bos = bpe_tokenizer(bos=False, chat=False)
    item = make_items(no_bos, HAYSTACK, context_lengths=[48], depths=[50], seed=0)[0]
    assert item["context_span"] == [0, 48]
    assert no_bos.decode(item["prompt_ids"]) == no_bos.decode(item["prompt_ids"][:48]) + "\n" + QUESTION + "\n"
    metaspace = metaspace_tokenizer()  # "\nWhat" alone is "▁", "\n", ...: in the prompt, without the "▁"
    item = make_items(metaspace, HAYSTACK, context_lengths=[40], depths=[50], seed=0)[0]
    after = metaspace.encode("\n" + QUESTION + "\n", add_special_tokens=False)
    assert metaspace.convert_ids_to_tokens(after[0]) == "\u2581" and item["prompt_ids"][41:] == after[1:]
    assert item["prompt_ids"][0] == metaspace.bos_token_id
    toy = ToyTokenizer()
    item = make_items(toy, HAYSTACK, context_lengths=[30], depths=[50], seed=0)[0]
    assert item["prompt_ids"] == [0] + item["prompt_ids"][1:31] + toy.encode("\n" + QUESTION + "\n", False)


def test_items_are_reproducible_from_their_seed_and_errors_name_the_lengths():
    tokenizer = bpe_tokenizer()
    settings = dict(context_lengths=[40], depths=[0, 50, 100], needles_per_setting=2)
    first = make_items(tokenizer, HAYSTACK, seed=7, **settings)
    assert make_items(tokenizer, HAYSTACK, seed=7, **settings) == first
    other = make_items(tokenizer, HAYSTACK, seed=8, **settings)
    assert [item["value"] for item in other] != [item["value"] for item in first]
    three = make_items(tokenizer, HAYSTACK, seed=7, value_digits=3, **settings)
    assert all(len(item["value"]) == 3 for item in three)
    short = HAYSTACK[:200]
    count = len(tokenizer.encode(short, add_special_tokens=False))
    with pytest.raises(ValueError, match=f"the haystack has {count} tokens, fewer than a context of 500"):
        make_items(tokenizer, short, context_lengths=[500], depths=[50])
    # a haystack just longer than the context wraps around for offsets near its end
    wrapped = make_items(tokenizer, short, context_lengths=[count - 2], depths=[50], needles_per_setting=5)
    assert all(len(range(*item["context_span"])) == count - 2 for item in wrapped)


def test_items_round_trip_and_a_bad_file_names_its_line(tmp_path):
    items = make_items(ToyTokenizer(), HAYSTACK, context_lengths=[30], depths=[0, 100], needles_per_setting=2)
    write_items(items, tmp_path / "items.jsonl")
    assert read_items(tmp_path / "items.jsonl") == items and read_items(tmp_path / "items.jsonl", 3) == items[:3]
    assert not list(tmp_path.glob(".items.jsonl.tmp-*"))  # the temporary it was written to is renamed
    lines = (tmp_path / "items.jsonl").read_text().splitlines()
    (tmp_path / "bad.jsonl").write_text("\n".join([lines[0], "{not json", *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: not JSON"):
        read_items(tmp_path / "bad.jsonl")
    broken = dict(items[2], needle_span=[5, 999])
    del items[1]["value"]
    (tmp_path / "missing.jsonl").write_text("\n".join(json.dumps(item) for item in items[:3]) + "\n")
    with pytest.raises(ValueError, match=r"missing\.jsonl:2: item without value"):
        read_items(tmp_path / "missing.jsonl")
    (tmp_path / "span.jsonl").write_text(lines[0] + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(ValueError, match=r"span\.jsonl:2: needle_span \[5, 999\] is not a \[start, end\) span"):
        read_items(tmp_path / "span.jsonl")


# --- scores --------------------------------------------------------------------------------------


def test_value_found_takes_the_number_whole():
    assert value_found("The special magic number is 60494.", "60494")
    assert value_found("60494", "60494") and value_found("(60494)", "60494") and value_found("x60494y", "60494")
    assert not value_found("604941", "60494") and not value_found("160494", "60494")
    assert not value_found("", "60494") and not value_found("60,494", "60494") and not value_found("6049", "60494")
    with pytest.raises(ValueError, match="digits"):
        value_found("abc", "6a")


def test_rouge1_recall_counts_lowercased_words_clipped():
    assert rouge1_recall("The number is 42.", "the NUMBER, is: 42!") == 1.0
    assert rouge1_recall("the the cat", "the cat") == pytest.approx(2 / 3)  # 'the' twice in the reference, once here
    assert rouge1_recall("the cat", "the the the cat cat") == 1.0  # clipped: no more than the reference has
    assert rouge1_recall("a b c d", "d x") == 0.25
    assert rouge1_recall("a b", "") == 0.0 and rouge1_recall("a b", "...") == 0.0
    with pytest.raises(ValueError, match="no words"):
        rouge1_recall(" .!", "a")


def test_accuracy_and_its_bootstrap():
    values = [str(10000 + i) for i in range(40)]
    right = [f"It is {v}." for v in values]
    half = [a if i % 2 else "I do not know" for i, a in enumerate(right)]
    assert retrieval_accuracy(right, values) == 1.0 and retrieval_accuracy(half, values) == 0.5
    boot = paired_bootstrap_retrieval(right, half, values, n_resamples=200, seed=0)
    assert boot.score_a == 1.0 and boot.score_b == 0.5 and boot.wins_a == 200 and boot.p_value == 0.0
    same = paired_bootstrap_retrieval(half, half, values, n_resamples=50)
    assert same.p_value == 1.0
    with pytest.raises(ValueError, match="3 answers but 40 values"):
        retrieval_accuracy(right[:3], values)


# --- answers of gate variants --------------------------------------------------------------------


def tiny_llama_gqa3(vocab, layers=3, seed=0):
    """Llama with 6 query heads reading 2 key/value heads: groups of 3."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=24, intermediate_size=48, num_hidden_layers=layers,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0,
                         eos_token_id=1, pad_token_id=2, attention_bias=False, attn_implementation="eager")
    return on_test_device(_random_biases(_spread_weights(LlamaForCausalLM(config).eval())))


def tiny_qwen3_gqa3(vocab, layers=3, seed=0):
    """Qwen3 (q/k RMSNorm per head, head_dim 12 on a hidden size of 24) with 6 query heads on 2 key/value heads:
    a family served by the generic decoder adapter only."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=vocab, hidden_size=24, intermediate_size=48, num_hidden_layers=layers,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=12, max_position_embeddings=256,
                         bos_token_id=0, eos_token_id=1, pad_token_id=2, attn_implementation="eager")
    return on_test_device(_random_biases(_spread_weights(Qwen3ForCausalLM(config).eval())))


def tiny_gpt2(vocab, layers=3, seed=0):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=vocab, n_embd=16, n_layer=layers, n_head=4, n_positions=256, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=1, pad_token_id=2,
                        attn_implementation="eager")
    return on_test_device(_random_biases(_spread_weights(GPT2LMHeadModel(config).eval())))


def gate_settings(model):
    heads = model.config.num_attention_heads
    return [None,
            gates_without(model, [("dec_self", 0, 1)]),  # a head off in layer 0
            gates_without(model, [("dec_self", 0, 3)]),  # another
            gates_without(model, [("dec_self", 2, h) for h in range(0, heads, 2)]),  # heads off in the last layer
            gates_without(model, [("dec_self", 1, 0), ("dec_self", 2, 3)])]  # two layers, the first 1


@contextlib.contextmanager
def prompt_work(model):
    """Per layer, the (row, position) pairs its query projection computed in passes over more than one
    position (the prompts; generate() then feeds one position at a time)."""
    sites = adapter_for(model).sites(model)
    work = [0] * len(sites)

    def count(layer):
        def hook(module, args, output):
            if args[0].shape[1] > 1:
                work[layer] += args[0].shape[0] * args[0].shape[1]
        return hook

    handles = [site.query.register_forward_hook(count(site.layer)) for site in sites]
    try:
        yield work
    finally:
        for handle in handles:
            handle.remove()


def reference_answers(model, tokenizer, items, gates, masking, max_new_tokens):
    """generate() on the model gated with one setting, the items of each prompt length in one batch."""
    stops = stop_token_ids(model, tokenizer)
    answers = [None] * len(items)
    lengths = sorted({len(item["prompt_ids"]) for item in items})
    with gated(model, gates, masking=masking):
        for length in lengths:
            which = [i for i, item in enumerate(items) if len(item["prompt_ids"]) == length]
            ids = on_test_device(torch.tensor([items[i]["prompt_ids"] for i in which]))
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                 max_new_tokens=max_new_tokens, eos_token_id=stops, pad_token_id=tokenizer.pad_token_id)
            for i, row in zip(which, out[:, length:].tolist()):
                cut = next((k for k, t in enumerate(row) if t in stops), len(row))
                answers[i] = row[:cut]
    return answers


def streaming(sink=2, recent=8):
    """DuoAttention's streaming heads (headprune.models.heads.Streaming), where this tree has them."""
    from headprune.models import heads

    if not hasattr(heads, "Streaming"):
        pytest.skip("no streaming masking in headprune.models.heads")
    return heads.Streaming(sink, recent)


@pytest.mark.parametrize("make_model, masking", [(tiny_llama_gqa3, "zero"), (tiny_llama_gqa3, "uniform"),
                                                 (tiny_llama_gqa3, streaming), (tiny_gpt2, "zero"),
                                                 (tiny_qwen3_gqa3, "zero"), (tiny_qwen3_gqa3, streaming)],
                         ids=["llama-gqa3-zero", "llama-gqa3-uniform", "llama-gqa3-streaming", "gpt2-zero",
                              "qwen3-gqa3-zero", "qwen3-gqa3-streaming"])
def test_answers_of_batched_variants_equal_generate_on_each_setting(make_model, masking):
    """Answers under each masking mode equal eager generate() with the same gates."""
    needs_exact_decoding()
    masking = masking() if callable(masking) else masking
    tokenizer = bpe_tokenizer()
    model = make_model(len(tokenizer))
    items = make_items(tokenizer, HAYSTACK, context_lengths=[40, 56], depths=[0, 50, 100], seed=2)
    settings = gate_settings(model)
    expected = [reference_answers(model, tokenizer, items, gates, masking, 8) for gates in settings]
    # 2 items per batch and 3 variants of them per generate(): chunks of first masked layers 3, 0, 0 | 2, 1;
    # then every variant in one chunk
    for batch_size, variant_batch_size in ((2, 6), (4, 64)):
        with prompt_work(model) as work:
            with masked_as(model, masking):
                tokens = generate_variants(model, tokenizer, items, settings, max_new_tokens=8, batch_size=batch_size,
                                           variant_batch_size=variant_batch_size)
        assert tokens == expected
        # the prompts (but their last token) went through layer j's attention once for the full model and once
        # per variant first masked below layer j (first masked layers 3, 0, 0, 2, 1): 1, 3, 4 times; with a
        # masking that acts inside the attention, also in the variant's first masked layer: 3, 4, 5 times
        prefix = sum(len(item["prompt_ids"]) - 1 for item in items)
        assert work == [prefix * n for n in ([1, 3, 4] if masking == "zero" else [3, 4, 5])]
    with masked_as(model, masking):
        answers = answer_variants(model, tokenizer, items, settings, max_new_tokens=8)
    assert answers == [[tokenizer.decode(a, skip_special_tokens=True) for a in per] for per in expected]
    assert all(len(set(map(tuple, (per[i] for per in expected)))) > 1 for i in range(len(items)))  # heads mattered
    assert any(len(a) == 8 for per in expected for a in per)


def test_answers_are_computed_in_sdpa_and_the_model_is_left_in_eager():
    """The evaluation needs no attention weights and runs in sdpa (headprune.models.loading.attention_backend);
    the answers are the eager model's generate() (test above) and the model goes back to eager after, even
    when the evaluation fails (to the attention it had: sdpa where the tests run in sdpa)."""
    tokenizer = bpe_tokenizer()
    model = tiny_llama_gqa3(len(tokenizer))
    own = model.config._attn_implementation
    items = make_items(tokenizer, HAYSTACK, context_lengths=[40], depths=[50], seed=2)
    seen = []
    hook = model.model.layers[0].self_attn.register_forward_pre_hook(
        lambda module, args: seen.append(model.config._attn_implementation))
    generate_variants(model, tokenizer, items, gate_settings(model), max_new_tokens=4)
    assert set(seen) == {"sdpa"} and model.config._attn_implementation == own
    hook.remove()
    hook = model.model.layers[0].self_attn.register_forward_pre_hook(lambda module, args: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        generate_variants(model, tokenizer, items, [None], max_new_tokens=4)
    hook.remove()
    assert model.config._attn_implementation == own


def test_a_stop_token_ends_the_answer():
    """The model's EOS, the tokenizer's and its end-of-turn token end an answer."""
    tokenizer = bpe_tokenizer()
    model = tiny_gpt2(len(tokenizer))
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert stop_token_ids(model, tokenizer) == [1, im_end]
    items = make_items(tokenizer, HAYSTACK, context_lengths=[40], depths=[0, 50, 100], seed=2)
    free = generate_variants(model, tokenizer, items, [None], max_new_tokens=8)[0]
    stop = free[0][2]
    model.generation_config.eos_token_id = [stop]
    assert stop_token_ids(model, tokenizer) == [stop, 1, im_end]
    stopped = generate_variants(model, tokenizer, items, [None], max_new_tokens=8)[0]
    assert stopped == [answer[:answer.index(stop)] if stop in answer else answer for answer in free]
    assert len(stopped[0]) < 3


# --- through runs.py ----------------------------------------------------------------------------


def test_retrieval_runs_scores_and_compares_through_the_study_evalset(tmp_path):
    needs_exact_decoding()  # answers of run() and run_variants() compared
    import pandas as pd

    from headprune.evaluation import metrics
    from headprune.evaluation.runs import (EvalSet, EvalSettings, compare_to_full, oracle_order, run, run_variants,
                                            score, significance)
    from headprune.workflow import load_evalset

    tokenizer = bpe_tokenizer()
    model = tiny_llama_gqa3(len(tokenizer))
    write_items(make_items(tokenizer, HAYSTACK, context_lengths=[40, 48], depths=[0, 50, 100], seed=4),
                tmp_path / "items.jsonl")
    evalset = load_evalset({"kind": "retrieval", "items": str(tmp_path / "items.jsonl"), "name": "niah",
                            "max_items": 5})
    assert evalset.kind == "retrieval" and evalset.metric == "retrieval" and len(evalset) == 5
    assert evalset.references == [item["value"] for item in evalset.sources]
    settings = EvalSettings(batch_size=2, variant_batch_size=8, max_new_tokens=6)
    variants = [None, gates_without(model, [("dec_self", 1, 2)])]
    full, ablated = run_variants(model, tokenizer, evalset, variants, settings)
    assert full == answer_variants(model, tokenizer, evalset.sources, [None], max_new_tokens=6)[0]
    assert run(model, tokenizer, evalset, variants[1], settings) == ablated
    assert score(evalset, full) == retrieval_accuracy(full, evalset.references)
    # scores of answers that hold the value or not
    right = [f"It is {v}." for v in evalset.references]
    wrong = ["It is 1."] * len(right)
    assert score(evalset, right) == 1.0 and score(evalset, wrong) == 0.0
    test = significance(evalset, right, wrong, resamples=100)
    assert test["p_bootstrap"] == 0.0 and np.isnan(test["p_ttest"])
    change = compare_to_full(evalset, {"score": 1.0, "outputs": right}, {"score": 0.0, "outputs": wrong},
                             resamples=100)
    assert change["delta"] == -1.0 and change["significant"] and change["metric"] == "retrieval"
    assert metrics.better_sign("retrieval") == 1
    table = pd.DataFrame([{"attn_type": "dec_self", "layer": 0, "head": 0, "score": 0.2, "metric": "retrieval"},
                          {"attn_type": "dec_self", "layer": 0, "head": 1, "score": 0.8, "metric": "retrieval"}])
    assert oracle_order(table)[0] == ("dec_self", 0, 1)  # the higher accuracy without the head: it hurts least
    assert EvalSet("retrieval", ["1"], [{}], "retrieval").metric == "retrieval"


def test_a_retrieval_study_runs_from_the_command_line(tmp_path):
    """``headprune sweep`` on needle-in-a-haystack items (.jsonl: a retrieval study, the kind read from the extension)
    is the API's single-head sweep of the retrieval kind's eval set, on the model ``hp.load_model`` loads as a
    retrieval study loads its model."""
    import headprune as hp
    from headprune import cli
    from headprune.evaluation.kinds import kind_of
    from headprune.evaluation.runs import EvalSettings

    tokenizer = bpe_tokenizer()
    folder = tmp_path / "llama"
    tiny_llama_gqa3(len(tokenizer), layers=2).cpu().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    items = tmp_path / "needles.jsonl"
    write_items(make_items(tokenizer, HAYSTACK, context_lengths=[40], depths=[0, 50, 100], seed=4), items)
    assert cli.main(list(map(str, ["sweep", folder, "--data", items, "--resamples", 50, "--study", "s", "--batch-size",
                                   2, "--variant-batch-size", 8, "--device", "cpu", "--out", tmp_path / "abl.csv"]))) == 0
    model, loaded_tokenizer = hp.load_model(folder, "retrieval")
    evalset = kind_of("retrieval").load_evalset({"items": str(items), "max_items": None})
    expected = hp.single_head_sweep(model, loaded_tokenizer, evalset, EvalSettings(batch_size=2, variant_batch_size=8),
                                    resamples=50, study="s", testset="needles (needle in a haystack)")
    expected.to_csv(tmp_path / "api.csv", index=False)
    assert (tmp_path / "abl.csv").read_text() == (tmp_path / "api.csv").read_text()
    assert len(expected) == 12 and set(expected.metric) == {"retrieval"}


def test_rouge1_recall_is_reported_beside_the_score_with_the_answer_prefix():
    from headprune.evaluation.runs import EvalSet, scores_beside

    needle = "The special magic number is 60494."
    items = [{"needle": needle, "answer_prefix": "The special magic number is"}, {"needle": needle}]
    evalset = EvalSet("retrieval", ["60494", "60494"], items, "retrieval")
    # 6/6 needle words with the prefix; 1/6 without one ("60494" alone)
    assert scores_beside(evalset, ["60494.", "60494"]) == {"rouge1_recall": (1.0 + 1 / 6) / 2}
    assert scores_beside(EvalSet("language_modeling", [[1, 2]], [[1, 2]], "perplexity"), [[1.0, 1]]) == {}
