"""A study scored by an lm-evaluation-harness task (kind lm_eval, headprune.evaluation.kinds.lm_eval): what the
config says resolves into the study's jobs, its score is lm-eval's own for every gate setting, its paired test
resamples the task's items, and a config or task that cannot run says so, naming the study and the task."""
import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from headprune.demo.corpora import make_wikitext_corpus
from headprune.demo.lm_task import make_passkey_task
from headprune.demo.models import tiny_llama_tokenizer
from headprune.evaluation import stats
from headprune.evaluation.kinds import kind_of
from headprune.evaluation.runs import EvalSettings, gates_without, run_variants, score
from headprune.models.heads import gated
from headprune.io.config_error import ConfigError
from headprune.studies import Pipeline
from headprune import stages

lm_eval = pytest.importorskip("lm_eval")
ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def task_yaml(tmp_path_factory):
    """The demo's task (which of four numbers a passage said) on a small corpus of the demo's language."""
    folder = tmp_path_factory.mktemp("task")
    corpus = make_wikitext_corpus(folder / "wikitext-2-raw-v1.zip", {"train": 40, "validation": 40, "test": 40})
    return make_passkey_task(corpus, folder / "demo_passkey.yaml", items_per_split={"test": 16, "validation": 4, "train": 12})


@pytest.fixture(scope="module")
def llama(task_yaml):
    """A random Llama with the quirks of real ones: 6 query heads on 2 key/value heads (groups of 3), tied
    embeddings, a tokenizer that puts <s> first."""
    text = (task_yaml.parent / "demo_passkey.test.jsonl").read_text()
    tokenizer = tiny_llama_tokenizer(text, 300)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=24, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=4, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.2, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         attn_implementation="eager")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval(), tokenizer


def spec(task, metric="acc", **changes):
    return {"kind": "lm_eval", "task": str(task), "num_fewshot": 0, "limit": None, "fewshot_seed": 1234,
            "metric": metric, "name": "demo_passkey (0-shot)", "max_items": None, **changes}


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_the_score_of_every_gate_setting_is_lm_evals_own(task_yaml, llama):
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    model, tokenizer = llama
    kind = kind_of("lm_eval")
    settings = [None, gates_without(model, [("dec_self", 0, 0)]),
                gates_without(model, [("dec_self", 1, h) for h in range(3)])]  # a whole key/value group
    for metric in ("acc", "acc_norm,none"):  # lm-eval's result key names a metric too
        evalset = kind.load_evalset(spec(task_yaml, metric))
        metric = metric.removesuffix(",none")
        assert len(evalset) == 16 and evalset.metric == metric
        outputs = run_variants(model, tokenizer, evalset, settings, EvalSettings(batch_size=4, progress=False))
        manager = TaskManager(include_path=str(task_yaml.parent), include_defaults=False)
        scores = [score(evalset, per_item) for per_item in outputs]
        for gates, ours in zip(settings, scores):
            with gated(model, gates):
                theirs = lm_eval.simple_evaluate(model=HFLM(pretrained=model, tokenizer=tokenizer, batch_size=4),
                                                 tasks=["demo_passkey"], task_manager=manager, num_fewshot=0)
            assert ours == theirs["results"]["demo_passkey"][f"{metric},none"]
        assert len({str(per_item) for per_item in outputs}) == len(settings)  # the settings changed the log-likelihoods


def test_significance_is_a_paired_bootstrap_over_the_tasks_items(task_yaml, llama):
    """For accuracy, resampling items and comparing mean accuracies is what the classification kind's paired
    bootstrap does on the chosen answers against the gold ones: the same p from the same seed."""
    from headprune.evaluation.lm_tasks import item_metrics

    model, tokenizer = llama
    kind = kind_of("lm_eval")
    evalset = kind.load_evalset(spec(task_yaml))
    full, ablated = run_variants(model, tokenizer, evalset, [None, gates_without(model, [("dec_self", 0, 1)])],
                                 EvalSettings(batch_size=4, progress=False))
    gold = [doc["label"] for doc in evalset.sources]

    def answers(outputs):  # the choice of highest log-likelihood, as lm-eval's acc takes it
        return [int(np.argmax([float(response[0]) for response in responses])) for responses in outputs]

    correct = [[items["acc"] for items in item_metrics(evalset.task, outputs)] for outputs in (full, ablated)]
    assert correct == [[float(a == g) for a, g in zip(answers(outputs), gold)] for outputs in (full, ablated)]
    ours = kind.significance(evalset, full, ablated, resamples=500, seed=3)
    reference = stats.paired_bootstrap_metric(answers(full), answers(ablated), gold, "accuracy", n_resamples=500,
                                              seed=3)
    assert ours["p_bootstrap"] == reference.p_value and np.isnan(ours["p_ttest"])
    assert kind.decisive_p == "p_bootstrap"


def test_an_lm_eval_study_runs_from_the_command_line(task_yaml, llama, tmp_path):
    """``headprune sweep`` on a task's YAML is an lm_eval study (the kind read from the extension): its table is the
    API's single-head sweep of the kind's own eval set of the model ``hp.load_model`` loads as an lm_eval study loads
    it; ``prune --kind lm_eval`` cuts the model on the task; ``score`` refuses, naming --data (I_h of such a study is
    estimated on other data)."""
    import pandas as pd

    import headprune as hp
    from headprune import cli

    model, tokenizer = llama
    folder = tmp_path / "tiny-llama"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    loaded, loaded_tokenizer = hp.load_model(folder, "lm_eval")
    assert type(loaded).__name__ == "LlamaForCausalLM"
    assert all(torch.equal(loaded.state_dict()[name], value) for name, value in model.state_dict().items())
    common = ["--max-items", 8, "--batch-size", 4, "--variant-batch-size", 64, "--device", "cpu"]
    assert cli.main(list(map(str, ["sweep", folder, "--data", task_yaml, "--resamples", 50, "--study", "s",
                                   "--out", tmp_path / "abl.csv", *common]))) == 0
    evalset = kind_of("lm_eval").load_evalset(spec(task_yaml, limit=8))
    expected = hp.single_head_sweep(loaded, loaded_tokenizer, evalset, EvalSettings(batch_size=4, variant_batch_size=64),
                                    resamples=50, study="s", testset="demo_passkey (0-shot)")
    expected.to_csv(tmp_path / "api.csv", index=False)
    assert (tmp_path / "abl.csv").read_text() == (tmp_path / "api.csv").read_text()
    table = pd.read_csv(tmp_path / "abl.csv")
    assert len(table) == 12 and set(table.metric) == {"acc"} and table.score_full.between(0, 1).all()

    assert cli.main(list(map(str, ["prune", folder, "--data", task_yaml, "--kind", "lm_eval", "--percent", 50,
                                   "--criterion", "random", "--step", 50, "--out", tmp_path / "pruned", *common]))) == 0
    curve = pd.read_csv(tmp_path / "pruned" / "pruning.csv")
    assert curve.heads_pruned.tolist() == [0, 6, 12] and set(curve.metric) == {"acc"}
    assert curve.score.iloc[0] == table.score_full.iloc[0]  # the unpruned model's score on the same 8 documents
    pruned, _ = hp.load_model(tmp_path / "pruned", "lm_eval")
    assert sum(len(heads) for heads in pruned.config.headprune_pruned_heads["dec_self"].values()) == 6

    with pytest.raises(SystemExit) as refused:
        cli.main(list(map(str, ["score", folder, "--data", task_yaml, "--out", tmp_path / "imp.csv", *common])))
    assert refused.value.code == 2 and not (tmp_path / "imp.csv").exists()


def test_a_metric_the_task_does_not_compute_stops_the_job_naming_the_task(task_yaml):
    from headprune.evaluation.lm_tasks import TaskError

    with pytest.raises(TaskError, match="demo_passkey.*(f1|exact_match)"):
        kind_of("lm_eval").load_evalset(spec(task_yaml, "exact_match"))


# --- the config ----------------------------------------------------------------------------------------


def demo_config():
    import yaml
    from headprune.config_schema import validate

    config = yaml.safe_load((ROOT / "demo/config.yaml").read_text())
    validate(config)
    return config


def with_entry(**entry):
    import yaml
    from headprune.config_schema import validate

    config = yaml.safe_load((ROOT / "demo/config.yaml").read_text())
    config["models"]["judged"] = {"kind": "lm_eval", "model": "tiny_llama", "task": "hellaswag", "metric": "acc_norm",
                                  **entry}
    config["models"]["judged"] = {key: value for key, value in config["models"]["judged"].items() if value is not None}
    config["experiments"]["ablation"].append("judged")
    validate(config)
    return Pipeline(config)


def test_a_study_scores_its_language_models_heads_on_the_task():
    pipeline = Pipeline(demo_config())
    study = pipeline.study("tiny_llama_passkey")
    assert study.lm is pipeline.study("tiny_llama") and study.heads == study.lm.heads
    assert study.evalset_spec() == spec("data/demo/upstream/lm_tasks/demo_passkey.yaml")
    assert study.eval_data(["eval"]) == ["data/demo/upstream/lm_tasks/demo_passkey.yaml"]  # the demo rule makes it
    # I_h on the task's own loss: the gold answers of the split it is not scored on (its training split)
    assert study.importance_spec == {"kind": "lm_eval", "study": "tiny_llama_passkey",
                                     "task": "data/demo/upstream/lm_tasks/demo_passkey.yaml", "split": None,
                                     "num_fewshot": 0, "fewshot_seed": 1234, "max_items": 500, "batch_size": 20}
    assert study.importance_data == study.eval_data(["eval"])
    assert study.importance_table == f"{pipeline.results_dir}/tiny_llama_passkey/importance.csv"  # its own job's
    corpus = with_entry(importance_split="corpus").study("judged")
    assert corpus.importance_spec == corpus.lm.importance_spec and corpus.importance_data == corpus.lm.importance_data
    assert corpus.importance_table == corpus.lm.importance_table
    registry = with_entry(num_fewshot=5, limit=100).study("judged")
    assert registry.eval_data(["eval"]) == []  # lm-eval fetches a registry task's data itself
    assert registry.evalset_spec()["name"] == "hellaswag (5-shot)" and registry.evalset_spec()["limit"] == 100
    assert with_entry(selection_task="arc_easy").study("judged").evalset_spec("selection")["task"] == "arc_easy"


@pytest.mark.parametrize("entry, key", [({"model": "tiny_llama_niah"}, "models.judged.model"),
                                        ({"metric": None}, "metric"), ({"task": None}, "task"),
                                        ({"num_fewshot": -1}, "num_fewshot"), ({"metric": "acc norm"}, "metric")])
def test_a_config_that_cannot_run_names_the_key(entry, key):
    from snakemake.exceptions import WorkflowError

    with pytest.raises((ConfigError, WorkflowError), match=key.replace(".", r"\.")):
        with_entry(**entry)


def test_a_task_study_has_no_out_of_domain_set():
    config = copy.deepcopy(demo_config())
    config["experiments"]["cross_domain"].append("tiny_llama_passkey")
    with pytest.raises(ConfigError, match="experiments.cross_domain names 'tiny_llama_passkey'"):
        Pipeline(config)


def test_wus_experiment_on_a_task_masks_the_heads_its_models_retrieval_study_finds():
    pipeline = Pipeline(demo_config())
    task = pipeline.study("tiny_llama_passkey")
    assert stages.retrieval.heads_source(task).name == "tiny_llama_niah"
    params = stages.retrieval.heads_params(task)
    assert [score["name"] for score in params["scores"]] == ["task", "perplexity"]
    assert params["scores"][0]["eval"] == task.evalset_spec() and params["heads_from"] == "tiny_llama_niah"
    assert stages.retrieval.heads_inputs(task)["roles"].endswith("/tiny_llama_niah/head_roles.csv")
    retrieval = stages.retrieval.heads_params(pipeline.study("tiny_llama_niah"))
    assert [score["name"] for score in retrieval["scores"]] == ["retrieval", "perplexity"]
    # the scorecard's W1 reads the heads' retrieval scores once, from the retrieval study
    assert stages.report.scorecard_inputs(pipeline)["roles"] == [f"{pipeline.results_dir}/tiny_llama_niah/head_roles.csv"]
    # one map per language model, its own perplexity first, then each study that scores it
    assert stages.figures.head_map_studies(pipeline) == {"tiny_llama": ["tiny_llama", "tiny_llama_niah", "tiny_llama_streaming",
                                                          "tiny_llama_passkey"]}


def test_wus_experiment_on_a_task_needs_a_retrieval_study_of_its_model():
    config = copy.deepcopy(demo_config())
    config["experiments"]["retrieval_heads"] = ["tiny_llama_passkey"]
    with pytest.raises(ConfigError, match="experiments.retrieval_heads names 'tiny_llama_passkey'.*none is"):
        Pipeline(config)
    config["experiments"]["retrieval_heads"] = ["tiny_llama_niah", "tiny_llama_streaming", "tiny_llama_passkey"]
    with pytest.raises(ConfigError, match="2 are"):
        Pipeline(config)
    config["models"]["tiny_llama_passkey"]["retrieval_study"] = "tiny_llama_streaming"
    assert stages.retrieval.heads_source(Pipeline(config).study("tiny_llama_passkey")).name == "tiny_llama_streaming"
    config["experiments"]["retrieval_heads"] = ["tiny_llama"]
    with pytest.raises(ConfigError, match="neither a retrieval study nor a task"):
        Pipeline(config)
