"""The Snakemake workflow: lint-clean, the paper's DAG, config errors that name the key."""
import collections
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dry_run import job_stats

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def snakemake(*args, cwd=ROOT, timeout=600):
    return subprocess.run([*SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_lint_is_clean():
    result = snakemake("--lint")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Congratulations" in result.stdout + result.stderr


def test_paper_dry_run_lists_one_ablation_job_per_head():
    result = snakemake("-n")
    assert result.returncode == 0, result.stderr
    counts = job_stats(result.stdout)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    experiments = config["experiments"]
    # Table 1, Figure 2 and the oracle pruning order all need every head ablated alone; Figure 6's
    # tasks are pruned in the importance order only (the paper's Appendix B) and need no ablation.
    ablated = set(experiments["ablation"]) | set(experiments["cross_domain"]) | set(experiments["pruning"])
    assert ablated == {"wmt14_en_fr", "mnli"} and set(experiments["glue_pruning"]) == {"sst2", "cola", "mrpc"}
    jobs = re.findall(r"output: results/(\S+?)/ablation/(\w+-\d+-\d+)\.json", result.stdout)
    per_study = collections.Counter(study for study, _ in jobs)
    assert per_study == {study: 288 if study == "wmt14_en_fr" else 144 for study in ablated}
    assert per_study["wmt14_en_fr"] == 288 and per_study["mnli"] == 144
    assert counts["ablate_head"] == sum(per_study.values())
    translation_heads = {head for study, head in jobs if study == "wmt14_en_fr"}
    assert len(translation_heads) == 288 and {h.split("-")[0] for h in translation_heads} == {
        "enc_self", "enc_dec", "dec_self"}
    assert counts["finetune"] == 4  # MNLI, SST-2, CoLA, MRPC
    assert counts["fetch_translation_checkpoint"] == counts["convert_translation_checkpoint"] == 1
    # importance, oracle, random for the Figure 3 studies; importance within each type of the
    # translation model (Figure 4); importance for each Figure 6 task
    assert counts["prune"] == 3 * len(experiments["pruning"]) + 3 + len(experiments["glue_pruning"])
    assert counts["importance"] == 5 and counts["plot_glue_pruning"] == 1
    figure6_inputs = re.search(r"rule plot_glue_pruning:\n\s+input: (.*)\n", result.stdout).group(1).split(", ")
    tasks = ("sst2", "cola", "mrpc")
    assert figure6_inputs == ([f"results/{task}/pruning/all/importance.csv" for task in tasks]
                              + [f"results/{task}/full.json" for task in tasks])  # full.json: the panels' family
    assert counts["fetch_testset"] == 7  # newstest2009-2014 and MTNT


def write_config(tmp_path, change):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    change(config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("change, message", [
    (lambda c: c["pruning"].update(stepp_percent=10), "'stepp_percent' was unexpected"),
    (lambda c: c["importance"].update(estimator="gradient"), "'gradient' is not one of"),
    (lambda c: c["experiments"].update(ablation=["qnli"]), "experiments.ablation names 'qnli'"),
    (lambda c: c["translation"].update(eval_set="newstest2099"), "translation.eval_set names 'newstest2099'"),
    (lambda c: c["glue"].update(rte={"task": "RTEE"}), "glue.rte.task is 'RTEE'"),
    (lambda c: c["experiments"].update(glue_pruning=["wmt14_en_fr"]), "experiments.glue_pruning names 'wmt14_en_fr'"),
    (lambda c: c["translation"].update(train_sets=["europarl"]), "translation.train_sets names 'europarl'"),
    (lambda c: c.update(concrete={"penalties": [0.1, -1]}), "-1 is less than or equal to the minimum of 0"),
    (lambda c: c.update(roles={"parser": "spacy"}), "'spacy' is not one of"),
    (lambda c: c.update(models={"roberta": {"kind": "classification", "task": "qnli", "source": {"hub": "roberta-base"},
                                            "layers": 12, "heads": 12}}), "models.roberta.task names 'qnli'"),
    (lambda c: c.update(models={"gpt2": {"kind": "language_modeling", "source": {"hub": "gpt2"}, "layers": 12,
                                         "heads": 12}}), "models.gpt2 is a language_modeling study: it needs 'corpus'"),
    (lambda c: c.update(models={"gpt2": {"kind": "language_modeling", "source": {"hub": "gpt2"}, "corpus": "wiki",
                                         "layers": 12, "heads": 12}}), "models.gpt2.corpus names 'wiki'"),
    (lambda c: c.update(models={"mnli": {"kind": "classification", "task": "mnli", "source": {"hub": "roberta-base"},
                                         "layers": 12, "heads": 12}}), "models.mnli has the name of another study"),
])
def test_bad_config_stops_before_any_job(tmp_path, change, message):
    result = snakemake("-n", "--configfile", str(write_config(tmp_path, change)))
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "Job stats" not in result.stdout


def test_demo_groups_heads_but_ablates_each_alone(tmp_path):
    """ablation.heads_per_job: 12 gives the demo's translation study two jobs (each named by its first and
    last head) and its MNLI study one, together covering every head once, each ablated alone;
    layers_per_job and orders_per_job do the same for one head per layer and the pruning orders, with
    the oracle order (which waits for the ablation) in a job of its own."""
    result = snakemake("-n", "--configfile", str(ROOT / "demo" / "config.yaml"), "--directory", str(tmp_path))
    assert result.returncode == 0, result.stderr
    jobs = set(re.findall(r"output: results/demo/(\w+)/ablation/(\S+)\.json", result.stdout))
    assert jobs == {("demo_en_fr", "enc_self-0-0..enc_dec-0-3"), ("demo_en_fr", "enc_dec-1-0..dec_self-1-3"),
                    ("mnli", "enc_self-0-0..enc_self-1-3"), ("roberta_mnli", "enc_self-0-0..enc_self-1-3"),
                    ("tiny_llama", "dec_self-0-0..dec_self-1-3"), ("tiny_llama_niah", "dec_self-0-0..dec_self-1-3"),
                    ("tiny_llama_streaming", "dec_self-0-0..dec_self-1-3"),
                    ("tiny_llama_passkey", "dec_self-0-0..dec_self-1-3")}
    layers = set(re.findall(r"output: results/demo/(\w+)/one_head/(\S+)\.json", result.stdout))
    assert layers == {("demo_en_fr", "enc_self-0..enc_dec-0"), ("demo_en_fr", "enc_dec-1..dec_self-1"),
                      ("mnli", "enc_self-0..enc_self-1"), ("tiny_llama", "dec_self-0..dec_self-1"),
                      ("tiny_llama_niah", "dec_self-0..dec_self-1"), ("tiny_llama_passkey", "dec_self-0..dec_self-1")}
    # (the finished demo's ablation.csv, one row per head, checks that the jobs evaluated every head)
    orders = set(re.findall(r"output: results/demo/demo_en_fr/pruning/all/(\S+)\.csv", result.stdout))
    assert orders == {"importance+random+fisher+attention_gradient+confidence", "entropy_low+entropy_high+combined"
                      "+iterative", "oracle"}


def imported(code: str, modules: tuple) -> list:
    """Which of ``modules`` a fresh Python has imported after running ``code``."""
    result = subprocess.run([sys.executable, "-c", f"{code}\nimport sys; print(sorted(m for m in {modules!r} "
                             "if m in sys.modules))"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


def test_jobs_without_a_model_do_not_import_torch():
    """Plot, fetch, significance and table jobs start in about a second, not four: the package
    modules their scripts use import torch and transformers only inside the functions that run a model,
    scipy.stats (0.8 s) only for a test's p-value and sacremoses (0.8 s) only for BLEU."""
    modules = ["workflow", "evaluation.runs", "evaluation.stats", "report.figures", "evaluation.metrics",
               "report.scorecard", "analyses.criteria", "data.datasets", "data.parsing", "io.download"]
    code = f"import {', '.join('headprune.' + m for m in modules)}"
    assert imported(code, ("torch", "transformers", "scipy.stats", "sacremoses", "sacrebleu")) == []


def test_a_classifier_job_imports_no_translation_or_statistics_code(tmp_path):
    """A cold job (a cluster job: no warm server) evaluating a BERT head imports what it runs: not the
    fairseq reader and FSMT's model code (0.3-0.5 s), scipy.stats, sacremoses or pandas; a BLEU score imports
    sacremoses where it is needed."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    BertForSequenceClassification(BertConfig(vocab_size=7, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=32, num_labels=3)).save_pretrained(tmp_path / "model")
    BertTokenizerFast(str(tmp_path / "vocab.txt")).save_pretrained(tmp_path / "model")
    job = f"""
from headprune.evaluation.runs import EvalSet, EvalSettings, gates_without, parse_head_name, run_variants, score
from headprune.models.loading import load_classifier
from headprune.workflow import load_evalset, load_study_model, logged, write_json
model, tokenizer = load_classifier({str(tmp_path / "model")!r})
evalset = EvalSet("classification", [0, 1], [("a b", "b"), ("b", "a a")], "accuracy")
outputs = run_variants(model, tokenizer, evalset, [gates_without(model, [parse_head_name("enc_self-1-0")])],
                       EvalSettings(batch_size=2, variant_batch_size=4))
assert 0 <= score(evalset, outputs[0], "detokenized") <= 1
"""
    heavy = ("scipy.stats", "sacremoses", "sacrebleu", "pandas", "headprune.models.fairseq",
             "transformers.models.fsmt.modeling_fsmt")
    assert imported(job, heavy) == []
    bleu = "from headprune.evaluation.metrics import bleu_tokenized; bleu_tokenized(['a b .'], ['a b .'], 'en')"
    assert imported(bleu, ("sacremoses", "sacrebleu")) == ["sacrebleu", "sacremoses"]


FAULTS_OF_LATER_BATCHES = """
import resource, sys, types
import torch
from headprune.workflow import logged

def batches():
    faults = []
    for i in range(12):  # a batch's activations: 256 MB and 48-64 MB, written, then freed
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        hidden = torch.empty(64 << 20).fill_(1.0)
        kept = torch.empty(1000)  # a small tensor allocated between them, as a model's are
        del hidden
        torch.empty((12 + i % 5) << 20).fill_(2.0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return sum(faults[6:])  # once the first batches have sized the heap

if sys.argv[1] == "job":
    with logged(types.SimpleNamespace(log=[sys.argv[2]], rule="job")):
        faults = batches()
else:
    faults = batches()
print(faults)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_a_job_keeps_the_memory_of_freed_activations(tmp_path):
    """Every job (headprune.workflow.logged) keeps the memory of freed activations for the next batch: once
    the heap has grown to a batch's size, later batches fault no pages in, where a plain process faults
    every page of every batch in again (glibc maps blocks over 32 MB anew each time)."""
    def faults(*how):
        result = subprocess.run([sys.executable, "-c", FAULTS_OF_LATER_BATCHES, *how], capture_output=True,
                                text=True, cwd=ROOT)
        assert result.returncode == 0, result.stderr
        return int(result.stdout.split()[-1])

    pages = 6 * ((256 << 20) + (14 << 22)) // 4096  # the six later batches' pages
    assert faults("plain") > 0.9 * pages
    assert faults("job", str(tmp_path / "job.log")) < 0.1 * pages


def test_learned_gates_and_head_roles_by_config(tmp_path):
    """experiments.concrete: one concrete_gates job per penalty and study, each after the study's importance
    (its I_h order is the comparison); experiments.head_roles: the parser's model fetched once (stanza),
    each study's eval source parsed once. The paper's config runs neither."""
    def change(config):
        config["experiments"].update(concrete=["wmt14_en_fr", "mnli"], head_roles=["wmt14_en_fr", "mnli"])
        config["concrete"] = {"penalties": [0.01, 0.05, 0.1]}
    result = snakemake("-n", "--configfile", str(write_config(tmp_path, change)))
    assert result.returncode == 0, result.stderr
    counts = job_stats(result.stdout)
    assert counts["concrete_gates"] == 6 and counts["collect_concrete"] == counts["plot_concrete"] == 2
    assert counts["fetch_parser"] == 1 and counts["parse_source"] == counts["head_roles"] == 2
    gates = set(re.findall(r"output: results/(\w+)/concrete/([0-9.e-]+)\.csv", result.stdout))
    assert gates == {(s, p) for s in ("wmt14_en_fr", "mnli") for p in ("0.01", "0.05", "0.1")}
    # the translation study trains on translation.train_sets (default: the importance sets)
    blocks = [b for b in re.split(r"\n(?=rule )", result.stdout)
              if b.startswith("rule concrete_gates:") and "study=wmt14_en_fr" in b]
    inputs = re.search(r"input: (.*)", blocks[0]).group(1).split(", ")
    assert {"data/testsets/newstest2009.en", "data/testsets/newstest2012.fr", "results/wmt14_en_fr/importance.csv",
            "data/testsets/newstest2013.en"} <= set(inputs)
    paper = job_stats(snakemake("-n").stdout)
    assert not {"concrete_gates", "fetch_parser", "parse_source", "head_roles"} & set(paper)


def test_llama_config_dry_run():
    """configs/llama.yaml: a decoder-only LM study by config alone, with the job count, GPUs per job and
    settings its comments state; a model that needs several GPUs asks for them per study."""
    from dry_run import planned_jobs

    result = snakemake("-n", "--configfile", "configs/llama.yaml")
    assert result.returncode == 0, result.stderr
    counts = job_stats(result.stdout)
    assert sum(counts.values()) == 286
    # perplexity and needle-in-a-haystack retrieval, each through every experiment; four lm-evaluation-harness
    # tasks through ablation and pruning
    assert counts["ablate_head"] == 6 * 32 and counts["one_head_layer"] == 2 * 11 and counts["prune"] == 6 * 3
    assert counts["evaluate_full"] == counts["significance"] == 6
    assert counts["make_retrieval_items"] == counts["head_roles"] == counts["plot_head_maps"] == 1
    assert counts["retrieval_heads"] == 2  # retrieval, and GSM8K under the same retrieval heads
    assert counts["importance"] == 5  # the language model's, and each task's on its gold answers
    assert counts["fetch_model"] == counts["fetch_corpus"] == counts["tokenize_corpus"] == counts["speed"] == 1
    assert not {"finetune", "fetch_translation_checkpoint", "train_dynamics"} & set(counts)
    heads = re.findall(r"output: results/llama/llama3_8b/ablation/(\S+)\.json", result.stdout)
    assert heads[:1] == ["dec_self-0-0..dec_self-0-31"] or "dec_self-0-0..dec_self-0-31" in heads
    gpus = {rule: res.get("gpu") for rule, res in planned_jobs(result.stdout, "resources")}
    assert gpus["ablate_head"] == gpus["importance"] == gpus["prune"] == gpus["speed"] == "1"

    def seventy_b(config):
        config["models"]["llama3_8b"]["resources"] = {"default": {"gpu": 2, "mem_mb": 200000}, "ablate": {"gpu": 4}}
    big = snakemake("-n", "--configfile", str(write_config_from(ROOT / "configs" / "llama.yaml", seventy_b)))
    assert big.returncode == 0, big.stderr
    gpus = {rule: res.get("gpu") for rule, res in planned_jobs(big.stdout, "resources")}
    assert gpus["ablate_head"] == "4" and gpus["importance"] == gpus["prune"] == "2"


def test_encoders_t5_config_dry_run():
    """configs/encoders_t5.yaml: ModernBERT on MNLI (fine-tuned by the pipeline, its heads enc_self) and Flan-T5
    translating, each one models: entry, with the job count its comments state; T5's prefix is a study parameter,
    so changing it reruns the study."""
    result = snakemake("-n", "--configfile", "configs/encoders_t5.yaml")
    assert result.returncode == 0, result.stderr
    counts = job_stats(result.stdout)
    assert sum(counts.values()) == 156
    # three orders each, and Figure 4 prunes each of the T5 study's attention types alone
    assert counts["ablate_head"] == 22 + 3 * 12 and counts["finetune"] == 1 and counts["prune"] == 2 * 3 + 3
    heads = set(re.findall(r"output: results/encoders_t5/(\w+)/ablation/(enc_self|enc_dec|dec_self)-", result.stdout))
    assert heads == {("modernbert_mnli", "enc_self"), ("flan_t5_en_fr", "enc_self"), ("flan_t5_en_fr", "enc_dec"),
                     ("flan_t5_en_fr", "dec_self")}
    from headprune.studies import Pipeline

    pipeline = Pipeline.from_file(ROOT / "configs" / "encoders_t5.yaml")
    assert pipeline.study("flan_t5_en_fr").params["source_prefix"] == "translate English to French: "
    assert "source_prefix" not in pipeline.study("modernbert_mnli").params


def write_config_from(base, change):
    import tempfile

    config = yaml.safe_load(Path(base).read_text())
    change(config)
    path = Path(tempfile.mkdtemp()) / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
