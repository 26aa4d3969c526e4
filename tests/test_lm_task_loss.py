"""headprune.evaluation.lm_task_loss: a task's own loss (its gold answers after their prompts, as
lm-evaluation-harness scores them) on a split it is not scored on, which I_h is estimated on for a study of kind
lm_eval. The reference is lm-eval's own HFLM scoring the gold answers, written out here from the task's data."""
import json

import pytest
import torch
from test_lm_tasks import llama_tokenizer, make_tasks, tiny_llama

from headprune.evaluation.kinds import kind_of
from headprune.evaluation.lm_task_loss import importance_split, task_loss_batches
from headprune.evaluation.lm_tasks import TaskError, load_task
from headprune.scoring.importance import head_importance

lm_eval = pytest.importorskip("lm_eval")


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return make_tasks(tmp_path_factory.mktemp("lm_task_loss"))


@pytest.fixture(scope="module")
def llama():
    tokenizer = llama_tokenizer()
    return tiny_llama(tokenizer, positions=64), tokenizer


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path_factory.getbasetemp() / "hf_datasets"))


def summed_nll(model, batches) -> float:
    """The batches' loss summed over their scored tokens, by hand from the logits."""
    total = 0.0
    with torch.no_grad():
        for batch in batches:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            targets = batch["labels"][:, 1:]
            nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), targets, ignore_index=-100,
                                                    reduction="sum")
            total += float(nll)
    return total


def hflm_gold_loglikelihood(model, tokenizer, pairs) -> float:
    """lm-eval's HFLM's summed log-likelihood of each (context, continuation) written out by hand."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    hflm = HFLM(pretrained=model, tokenizer=tokenizer, batch_size=2)
    requests = [Instance(request_type="loglikelihood", doc={}, arguments=pair, idx=0) for pair in pairs]
    return sum(logprob for logprob, _ in hflm.loglikelihood(requests, disable_tqdm=True))


def rows(path, split):
    files = json.loads(path.read_text())["dataset_kwargs"]["data_files"]
    return [json.loads(line) for line in open(files[split])]


def test_multiple_choice_the_gold_choice_after_its_question_on_the_training_split(tasks, llama):
    model, tokenizer = llama
    task = load_task(str(tasks["mc"]), split=importance_split)
    train = rows(tasks["mc"], "train")
    assert [doc["question"] for doc in task.docs] == [doc["question"] for doc in train]  # not the test split's
    batches = task_loss_batches(model, tokenizer, task, batch_size=4)
    gold = [(f"Question: {doc['question']}\nAnswer:", f" {doc['choices'][doc['label']]}") for doc in train]
    assert summed_nll(model, batches) == pytest.approx(-hflm_gold_loglikelihood(model, tokenizer, gold), abs=1e-4)
    scored = sum(int((b["labels"] != -100).sum()) for b in batches)
    assert scored == sum(len(tokenizer(cont, add_special_tokens=False)["input_ids"]) for _, cont in gold)


def test_generation_the_reference_answer_after_the_prompt(tasks, llama):
    model, tokenizer = llama
    task = load_task(str(tasks["generation"]), split="train")
    train = rows(tasks["generation"], "train")
    batches = task_loss_batches(model, tokenizer, task, batch_size=3)
    gold = [(doc["prompt"], doc["answer"]) for doc in train]  # the task's target delimiter is ""
    assert summed_nll(model, batches) == pytest.approx(-hflm_gold_loglikelihood(model, tokenizer, gold), abs=1e-4)


def test_head_importance_on_the_task_loss_is_its_gradient(tasks, llama):
    """I_h on the task's batches is |dL/dxi_h| of the summed gold-answer loss over its scored tokens: checked for
    one head by a central finite difference in its gate, in float64 (Llama's rotary tables stay float32: a step
    of 1e-2 keeps their rounding out of the difference, and its second-order term is below 1e-3)."""
    import copy

    from headprune.models.heads import full_gates, gated

    model, tokenizer = llama
    model = copy.deepcopy(model).double()
    batches = task_loss_batches(model, tokenizer, load_task(str(tasks["mc"]), split="train"), batch_size=8)
    assert len(batches) == 1
    table = head_importance(model, batches, estimator="batch", normalize=False)
    assert len(table) == 3 * 6 and (table["importance"] > 0).all()

    def loss(value):
        gates = full_gates(model)
        gates["dec_self"][1, 4] = value
        with torch.no_grad(), gated(model, gates):
            return summed_nll(model, batches)

    h = 1e-2
    derivative = (loss(1 + h) - loss(1 - h)) / (2 * h)
    row = table[(table["layer"] == 1) & (table["head"] == 4)].iloc[0]
    scored = int((batches[0]["labels"] != -100).sum())  # the estimator divides by the tokens it predicts
    assert row["importance_batch"] * scored == pytest.approx(abs(derivative), rel=1e-3)


def test_a_task_without_another_split_names_the_key(tasks, llama):
    """The rolling task has a test split only: its loss on that split would rank heads by the items scored."""
    model, tokenizer = llama
    data = {"kind": "lm_eval", "study": "judged", "task": str(tasks["rolling"]), "split": None, "num_fewshot": 0,
            "fewshot_seed": 1234, "max_items": 4, "batch_size": 2}
    with pytest.raises(TaskError, match=r"tiny_rolling.*models\.judged\.importance_split"):
        kind_of("lm_eval").importance_batches(tokenizer, data, model)
    with pytest.raises(TaskError, match=r"no split 'dev'.*models\.judged\.importance_split"):
        kind_of("lm_eval").importance_batches(tokenizer, {**data, "split": "dev"}, model)
    # named, a split is used as it is (here the scored one, as a user may choose), each window scored
    batches = kind_of("lm_eval").importance_batches(tokenizer, {**data, "split": "test"}, model)
    assert sum(len(b["input_ids"]) for b in batches) > 4  # the texts are longer than the model's positions
