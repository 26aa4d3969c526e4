"""headprune.studies: the config resolved into studies, tested directly on the three shipped configs
(the paper's, the demo's and configs/llama.yaml) and on broken ones. The expected values are read off
the configs by hand (layers x heads x attention types, the sets each role names)."""
import copy
from pathlib import Path

import pytest
import yaml
from headprune.config_schema import validate

from headprune.stages.ablation import chunk_items, chunks
from headprune.stages.concrete import penalty_name
from headprune.io.config_error import ConfigError
from headprune.studies import Pipeline
from headprune import stages

ROOT = Path(__file__).resolve().parents[1]


def validated(path):
    config = yaml.safe_load((ROOT / path).read_text())
    validate(config)
    return config


@pytest.fixture(scope="module")
def paper():
    return Pipeline.from_file(ROOT / "config.yaml")


@pytest.fixture(scope="module")
def demo():
    return Pipeline.from_file(ROOT / "demo" / "config.yaml")


@pytest.fixture(scope="module")
def llama():
    return Pipeline.from_file(ROOT / "configs" / "llama.yaml")


def test_the_papers_studies_their_kinds_and_heads(paper):
    assert paper.study_names == ["wmt14_en_fr", "mnli", "sst2", "cola", "mrpc"]
    wmt, mnli = paper.study("wmt14_en_fr"), paper.study("mnli")
    assert (wmt.kind.name, mnli.kind.name, paper.study("sst2").kind.name) == ("translation", "classification", "classification")
    # transformer-large: 6 layers x 16 heads in each of its three attention types; BERT-base 12 x 12
    assert len(wmt.heads) == 3 * 6 * 16 and wmt.heads[0] == "enc_self-0-0" and wmt.heads[-1] == "dec_self-5-15"
    assert len(mnli.heads) == 144 and set(h.split("-")[0] for h in mnli.heads) == {"enc_self"}
    assert wmt.layers[6] == "enc_dec-0" and len(mnli.layers) == 12
    assert wmt.experiments == ["ablation", "pruning", "cross_domain", "one_head_per_layer", "attention_types"]  # the config's order
    assert paper.study("sst2").experiments == ["glue_pruning"]


def test_the_papers_test_sets_by_role(paper):
    wmt, mnli = paper.study("wmt14_en_fr"), paper.study("mnli")
    assert [wmt.evalset_name(role) for role in ("eval", "ood", "selection", "test")] == \
        ["newstest2013", "mtnt", "newstest2013", "newstest2014"]
    assert wmt.evalset_spec("ood") == {"kind": "translation", "source": "data/testsets/mtnt.en",
                                       "reference": "data/testsets/mtnt.fr", "lang": "fr", "max_items": None,
                                       "name": "mtnt"}
    assert [mnli.evalset_name(role) for role in ("eval", "ood", "selection", "test")] == \
        ["dev", "dev_mismatched", "train", "dev"]
    # Tables 2-3 choose the head on 5000 seeded training examples, as the paper does
    selection = mnli.evalset_spec("selection")
    assert (selection["tsv"], selection["max_items"]) == ("data/glue/mnli/train.tsv", 5000)
    assert stages.ablation.roles(wmt) == ["eval", "ood"] and stages.ablation.full_model_roles(wmt) == ["eval", "ood", "test"]
    # the files a job reads: the test sets of every role it evaluates, each once
    assert wmt.eval_data(["eval", "selection"]) == ["data/testsets/newstest2013.en", "data/testsets/newstest2013.fr"]
    assert wmt.importance_data == [f"data/testsets/newstest20{y}.{lang}" for y in ("09", "10", "11", "12")
                                   for lang in ("en", "fr")]
    assert mnli.importance_spec["tsv"] == "data/glue/mnli/train.tsv"


def test_the_papers_models_and_jobs(paper):
    wmt, mnli, sst2 = paper.study("wmt14_en_fr"), paper.study("mnli"), paper.study("sst2")
    assert wmt.model_path == "data/checkpoints/wmt14_en_fr.model"
    assert mnli.model_path == "results/models/mnli" and stages.finetune.pretrained(mnli) == "data/checkpoints/bert-pretrained"
    # one job per head and per layer in the paper's config
    assert len(stages.ablation.jobs(wmt)) == 288 and len(stages.ablation.one_head_jobs(mnli)) == 12
    assert stages.pruning.scopes(wmt) == {"all": ["importance", "oracle", "random"], "enc_self": ["importance"],
                                  "enc_dec": ["importance"], "dec_self": ["importance"]}
    # the oracle waits for the whole ablation: a job of its own
    assert ("all", "oracle") in stages.pruning.jobs(wmt) and ("all", "importance") in stages.pruning.jobs(wmt)
    # Figure 6 prunes a glue task in the importance order only: no single-head ablation needed
    assert stages.pruning.jobs(sst2) == [("all", "importance")] and stages.pruning.criteria(sst2) == []
    assert stages.constants.eval_settings(mnli, "detokenized")["batch_size"] == 64
    # the keys in their order of old (masking before variant_batch_size): finished jobs' params unchanged
    assert list(stages.constants.eval_settings(mnli, "detokenized")) == ["batch_size", "max_length", "masking",
                                                                        "variant_batch_size"]
    assert list(stages.constants.eval_settings(wmt, "detokenized")) == ["batch_size", "beam", "lenpen", "bleu",
                                                                       "masking", "variant_batch_size"]
    assert wmt.resource("ablate", "gpu") == 1


def test_the_papers_targets_are_every_table_and_figure(paper):
    targets = paper.targets()
    for name in ("wmt14_en_fr/table1.md", "mnli/figure1.pdf", "wmt14_en_fr/figure2.csv", "mnli/figure3.png",
                 "wmt14_en_fr/figure4.png", "figure6.pdf", "wmt14_en_fr/one_head_per_layer.md",
                 "wmt14_en_fr/table4.md", "iwslt14_de_en/figure5.png", "scorecard.md"):
        assert f"results/figures/{name}" in targets, name
    assert not [t for t in targets if "criteria" in t or "concrete" in t or "head_roles" in t]  # off in the paper's
    assert stages.dynamics.of(paper).epochs == paper.config["dynamics"]["train"]["checkpoint_epochs"]
    assert stages.report.paper_models(paper)["iwslt14_de_en"] == "IWSLT"


def test_the_demos_any_model_studies(demo):
    llama, roberta = demo.study("tiny_llama"), demo.study("roberta_mnli")
    assert (llama.kind.name, roberta.kind.name) == ("language_modeling", "classification")
    assert llama.heads == [f"dec_self-{layer}-{head}" for layer in range(2) for head in range(4)]
    assert llama.params["kv_heads"] == 2 and "kv_heads" not in demo.study("mnli").params
    assert llama.evalset_spec() == {"kind": "language_modeling", "windows": "data/demo/windows/tiny_llama/test.npy",
                                    "name": "test (64-token windows)", "window": 64, "max_items": 100}
    assert llama.lm_needed_splits == ["test", "train", "validation"]
    assert llama.importance_spec == {"kind": "language_modeling", "windows": "data/demo/windows/tiny_llama/train.npy",
                                     "batch_size": 50, "max_items": 200}
    with pytest.raises(ConfigError, match="no out-of-domain set"):
        llama.evalset_name("ood")
    # a classification models entry is fine-tuned by the pipeline from its own source, on its glue task's data
    assert roberta.task == "mnli" and roberta.glue_dir == "data/demo/glue/mnli"
    assert roberta.model_path == "results/demo/models/roberta_mnli"
    assert stages.finetune.pretrained(roberta) == "data/demo/models/roberta_mnli"
    assert stages.finetune.params(roberta)["epochs"] == 5 and stages.finetune.params(demo.study("mnli"))["epochs"] != 5
    assert llama.model_path == "data/demo/models/tiny_llama"  # an LM is used as fetched


def test_a_glue_tasks_own_finetune_settings():
    """glue.<task>.finetune replaces bert.finetune's settings for every model fine-tuned on that task, a
    models.<study>.finetune replaces those in turn, and the setting is not part of the task's data spec (changing
    it re-runs the fine-tuning, not the data preparation)."""
    config = copy.deepcopy(validated("demo/config.yaml"))
    config["glue"]["mnli"]["finetune"] = {"epochs": 2, "lr": 5.0e-4}
    config["models"]["roberta_mnli"]["finetune"] = {"epochs": 3}
    validate(config)
    pipeline = Pipeline(config)
    base = config["bert"]["finetune"]
    mnli, roberta, sst2 = (stages.finetune.params(pipeline.study(name)) for name in ("mnli", "roberta_mnli", "sst2"))
    assert (mnli["epochs"], mnli["lr"], mnli["batch_size"]) == (2, 5.0e-4, base["batch_size"])
    assert (roberta["epochs"], roberta["lr"]) == (3, 5.0e-4)
    assert (sst2["epochs"], sst2["lr"]) == (5, base["lr"]) != (base["epochs"], base["lr"])  # the demo's own
    assert "finetune" not in pipeline.glue_task_spec("mnli")
    config["glue"]["mnli"]["finetune"] = {"epochs": 2, "optimizer": "sgd"}
    with pytest.raises(Exception, match="optimizer"):
        validate(config)


def test_the_demos_bundled_jobs(demo):
    translation = demo.study(demo.translation_name)
    per_job = demo.config["ablation"]["heads_per_job"]
    jobs = stages.ablation.jobs(translation)
    assert len(jobs) == -(-len(translation.heads) // per_job)
    # every head is in exactly one job, in order
    assert [h for job in jobs for h in stages.ablation.job_heads(translation, job)] == translation.heads
    orders = demo.config["pruning"]["orders"]
    all_scope = [o for scope, o in stages.pruning.jobs(translation) if scope == "all"]
    assert all_scope[-1] == "oracle" and "oracle" not in all_scope[0].split("+")
    assert set("+".join(all_scope).split("+")) == set(orders) | set(stages.pruning.criteria(translation))
    assert set(stages.pruning.criteria(translation)) == set(demo.config["criteria"]["compare"])
    assert stages.pruning.criteria_jobs(translation) and all(set(o.split("+")) & set(stages.pruning.criteria(translation))
                                             for o in stages.pruning.criteria_jobs(translation))


def test_a_retrieval_study_scores_its_language_model(demo):
    niah, lm = demo.study("tiny_llama_niah"), demo.study("tiny_llama")
    assert niah.kind.name == "retrieval" and niah.lm is lm
    # the language model's weights, heads and architecture; its own items, made once from the LM's corpus
    assert niah.model_path == lm.model_path and niah.heads == lm.heads
    assert niah.params == {**lm.params, "name": "tiny_llama_niah", "kind": "retrieval"}
    assert niah.evalset_spec() == {"kind": "retrieval", "items": "data/demo/retrieval/tiny_llama_niah/test.jsonl",
                                   "name": "needle in a haystack, test split (96/192-token contexts)", "max_items": None}
    assert niah.evalset_name("selection") == "validation"
    assert stages.retrieval.items_params(niah)["splits"] == ["test", "validation"]
    assert niah.retrieval["context_lengths"] == [96, 192] and niah.retrieval["needle"] == "The special magic number is {value}."
    # pruned by I_h estimated on perplexity: the language model's importance table, no job of its own
    assert niah.importance_table == "results/demo/tiny_llama/importance.csv" == lm.importance_table
    settings = stages.constants.eval_settings(niah, "tokenized", word="zero")
    assert settings == {"batch_size": 10, "masking": "zero", "variant_batch_size": 64, "max_new_tokens": 8}
    # in the order the kind wrote them before the constants stage added masking: a job's params (compared by
    # repr) as finished runs recorded them
    assert list(settings) == ["batch_size", "masking", "variant_batch_size", "max_new_tokens"]
    assert set(stages.roles.inputs(niah)) == {"model", "importance", "windows", "needles"}
    assert [scope_orders[1] for scope_orders in stages.pruning.jobs(niah)][-1] == "oracle"
    assert "retrieval" in stages.pruning.criteria(niah) and niah.experiments == ["ablation", "pruning", "one_head_per_layer",
                                                                 "criteria", "head_roles", "retrieval_heads"]
    # Wu's experiment: K beyond the model's 8 heads is left out
    assert stages.retrieval.heads_params(niah)["k"] == [1, 2]
    assert [s.name for s in stages.retrieval.scored_side_by_side(demo)] == ["tiny_llama_niah"]


def test_streaming_masking_of_one_study(demo):
    streaming = demo.study("tiny_llama_streaming")
    settings = stages.ablation.job_params(streaming, stages.ablation.jobs(streaming)[0])["settings"]
    assert settings["masking"] == {"word": "streaming", "sink": 4, "recent": 16}
    # the other studies keep the experiment's masking, and no streaming keys
    assert "sink" not in stages.ablation.job_params(demo.study("tiny_llama"), stages.ablation.jobs(demo.study("tiny_llama"))[0])["settings"]


def test_llama_config(llama):
    assert llama.study_names[-6:] == ["llama3_8b", "llama3_8b_niah", "llama3_8b_hellaswag", "llama3_8b_arc_easy",
                                      "llama3_8b_mmlu", "llama3_8b_gsm8k"]
    gsm8k = llama.study("llama3_8b_gsm8k")  # a task's study: the model's heads, GPUs and memory, scored by lm-eval
    assert gsm8k.heads == llama.study("llama3_8b").heads and gsm8k.resource("ablate", "gpu") == 1
    assert gsm8k.evalset_spec()["metric"] == "exact_match,strict-match" and gsm8k.evalset_spec()["num_fewshot"] == 5
    study = llama.study("llama3_8b")
    niah = llama.study("llama3_8b_niah")
    # needle in a haystack from 1K tokens to the model's 8K limit, the needle at 0-100% in steps of 10%
    assert niah.retrieval["context_lengths"] == [1024, 2048, 4096, 8192]
    assert niah.retrieval["depths"] == list(range(0, 101, 10))
    # the retrieval study runs on its model's GPUs and memory, with a runtime of its own
    assert (niah.resource("ablate", "gpu"), niah.resource("ablate", "mem_mb"), niah.resource("ablate", "runtime")) \
        == (1, 64000, 360)
    assert len(study.heads) == 32 * 32
    # 32 heads per ablation job: one layer each; 3 layers per one-head-per-layer job: 11 jobs
    assert len(stages.ablation.jobs(study)) == 32 and stages.ablation.jobs(study)[1] == "dec_self-1-0..dec_self-1-31"
    assert len(stages.ablation.one_head_jobs(study)) == 11 and stages.ablation.one_head_job_layers(study, "dec_self-30..dec_self-31") == \
        ["dec_self-30", "dec_self-31"]
    assert stages.pruning.jobs(study) == [("all", "importance"), ("all", "random"), ("all", "oracle")]
    assert study.params["dtype"] == "bfloat16"
    # a study's own resources override config.resources for its jobs only
    assert study.resource("ablate", "gpu") == 1 and study.resource("ablate", "mem_mb") == 64000
    assert list(stages.constants.eval_settings(study, "detokenized").items()) == \
        [("batch_size", 4), ("masking", "zero"), ("variant_batch_size", 4)]


def test_chunks_and_penalties():
    items = ["a", "b", "c", "d", "e"]
    assert chunks(items, 2) == ["a..b", "c..d", "e"]
    assert chunk_items(items, "b..d") == ["b", "c", "d"] and chunk_items(items, "e") == ["e"]
    with pytest.raises(ValueError, match="does not name a run"):
        chunk_items(items, "x..y")
    assert penalty_name(0.05) == "0.05" and penalty_name(1e-3) == "0.001"


def broken(edit, path="demo/config.yaml"):
    config = copy.deepcopy(validated(path))
    edit(config)
    return config


@pytest.mark.parametrize("edit, key", [
    (lambda c: c["experiments"]["ablation"].append("qnli"), "experiments.ablation names 'qnli'"),
    (lambda c: c["translation"].update(eval_set="newstest2099"), "translation.eval_set names 'newstest2099'"),
    (lambda c: c["glue"]["sst2"].update(task="nope"), "glue.sst2.task is 'nope'"),
    (lambda c: c["models"]["roberta_mnli"].update(task="qnli"), "models.roberta_mnli.task names 'qnli'"),
    (lambda c: c["models"]["tiny_llama"].update(corpus="c4"), "models.tiny_llama.corpus names 'c4'"),
    (lambda c: c["models"]["tiny_llama"].update(eval_split="dev"), "models.tiny_llama.eval_split is 'dev'"),
    (lambda c: c["experiments"]["retrieval_heads"].append("tiny_llama"), "experiments.retrieval_heads names 'tiny_llama'"),
    (lambda c: c["experiments"]["cross_domain"].append("tiny_llama_niah"), "experiments.cross_domain names 'tiny_llama_niah'"),
    (lambda c: c["models"]["tiny_llama_niah"].update(model="roberta_mnli"), "models.tiny_llama_niah.model names 'roberta_mnli'"),
    (lambda c: c["models"]["tiny_llama_niah"].update(haystack_split="dev"), "models.tiny_llama_niah.haystack_split is 'dev'"),
    (lambda c: c["models"]["roberta_mnli"].update(masking="streaming"), "models.roberta_mnli.masking is streaming"),
    (lambda c: c["speed"].update(studies=["tiny_llama_niah"]), "speed.studies names 'tiny_llama_niah'"),
    (lambda c: c["experiments"]["glue_pruning"].append(c["translation"]["name"]), "experiments.glue_pruning names"),
    (lambda c: c["speed"].update(studies=["nope"]), "speed.studies names 'nope'"),
    (lambda c: c["dynamics"]["train"].update(checkpoint_epochs=[3, 1]), "dynamics.train.checkpoint_epochs"),
    (lambda c: c["dynamics"].update(name="mnli"), "dynamics.name 'mnli' is also a study name"),
])
def test_a_config_that_cannot_run_names_its_key(edit, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.").replace("(", r"\(")):
        Pipeline(broken(edit))


def test_a_study_the_config_does_not_have_is_named():
    pipeline = Pipeline(validated("demo/config.yaml"))
    with pytest.raises(KeyError, match="'qnli' is not a study"):
        pipeline.study("qnli")


def test_common_smk_asks_the_pipeline():
    """The rules resolve no study themselves: no branching on a study's kind in rules/, and common.smk holds the
    validation and the generic helpers only (no one-line wrapper per rule)."""
    import re

    text = "".join(p.read_text() for p in (ROOT / "rules").glob("*.smk"))
    assert "kind ==" not in text and "study_kind" not in text
    common = (ROOT / "rules" / "common.smk").read_text()
    assert re.findall(r"^def (\w+)", common, re.M) == ["study", "stage_answer", "_stage_answer", "study_attribute",
                                                        "_study_attribute", "of_pipeline", "_of_pipeline", "resource",
                                                        "study_resource", "resource_of_study", "rule_threads"]


def test_each_stage_owns_its_jobs():
    """A rules file's study-specific inputs and params are its stage's functions (headprune/stages/<stage>.py beside
    rules/<stage>.smk), and every stage function a rules file names exists; a stage module imports no study and
    no other rules file's stage but those below it (ablation, pruning)."""
    import ast
    import re

    from headprune import stages

    named = set()
    for rules in sorted((ROOT / "rules").glob("*.smk")):
        for module, function in re.findall(r"stages\.(\w+)\.(\w+)", rules.read_text()):
            assert (ROOT / "rules" / f"{module}.smk").exists(), f"{rules.name} calls stage {module}, which has no rules file"
            if module not in ("figures", "report"):  # run-wide stages read the others' paths
                assert module == rules.stem, f"{rules.name} calls stages.{module}.{function}: another stage's job"
            assert callable(getattr(getattr(stages, module), function)), f"stages.{module}.{function}"
            named.add(module)
    assert named == {p.stem for p in (ROOT / "headprune" / "stages").glob("*.py")} - {"__init__"}
    for path in (ROOT / "headprune" / "stages").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module != "headprune.studies", f"{path.name} imports the studies"
                if node.module.startswith("headprune.stages") and path.stem != "__init__":
                    imported = {alias.name for alias in node.names} if node.module == "headprune.stages" else \
                        {node.module.rsplit(".", 1)[1]}
                    # those below the others (constants: the masking data's path), and Figure 5's epochs for the report
                    allowed = {"ablation", "pruning", "masking_modes", "retrieval", "constants"}
                    assert imported <= allowed | ({"dynamics"} if path.stem == "report" else set()), (path.name, imported)


def test_a_study_is_its_identity_model_and_evaluation_sets():
    """Study keeps a study's identity, model and evaluation sets (under 250 lines); what jobs read and are asked
    is the stages'."""
    import ast

    tree = ast.parse((ROOT / "headprune" / "studies.py").read_text())
    study = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Study")
    assert study.end_lineno - study.lineno < 250
    methods = {node.name for node in study.body if isinstance(node, ast.FunctionDef)}
    assert not {name for name in methods if name.endswith(("_params", "_inputs", "_jobs", "_tables"))}


def test_the_stages_are_found_and_own_the_experiments_and_the_targets(paper):
    """Every module of headprune/stages is a stage with a rules file, which the Snakefile includes without naming
    it; each experiment of the schema has one stage that owns it; the run's targets are the stages' (Study asks
    none of them)."""
    import ast

    from headprune.config_schema import schema

    assert list(stages.STAGES) == sorted(p.stem for p in (ROOT / "headprune" / "stages").glob("*.py")
                                         if not p.stem.startswith("_"))
    assert all((ROOT / path).is_file() for path in stages.rules_files())
    snakefile = (ROOT / "Snakefile").read_text()
    assert not [name for name in stages.STAGES if f"rules/{name}.smk" in snakefile]
    owned = stages.experiments()
    assert sorted(owned) == sorted(set(owned)) == sorted(schema()["properties"]["experiments"]["properties"])
    assert stages.targets(paper) == paper.targets() and f"{paper.figures_dir}/scorecard.md" in paper.targets()
    tree = ast.parse((ROOT / "headprune" / "studies.py").read_text())
    study = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Study")
    assert not [node for node in ast.walk(study) if isinstance(node, ast.Name) and node.id == "stages"]


def test_each_stage_describes_its_own_experiments_and_sections():
    """A stage's schema file (rules/schemas/<stage>.schema.yaml) holds its experiments' entries, exactly its
    EXPERIMENTS, and sections no other file describes; the shared file describes no experiment."""
    import yaml

    schemas = ROOT / "rules" / "schemas"
    shared = yaml.safe_load((schemas / "config.schema.yaml").read_text())
    assert shared["properties"]["experiments"]["properties"] == {}
    sections = {}
    for name, stage in stages.STAGES.items():
        path = schemas / f"{name}.schema.yaml"
        if not path.is_file():
            assert not getattr(stage, "EXPERIMENTS", ()), f"{name} owns experiments but has no schema file"
            continue
        own = yaml.safe_load(path.read_text())["properties"]
        experiments = own.pop("experiments", {}).get("properties", {})
        assert sorted(experiments) == sorted(getattr(stage, "EXPERIMENTS", ())), name
        for section in own:
            assert section not in shared["properties"] and section not in sections, (name, section)
            sections[section] = name
    assert {"ablation", "pruning", "criteria", "concrete", "roles", "speed", "dynamics"} <= set(sections)


def test_the_config_checks_are_one_section_each():
    """No check function holds unrelated checks in one: each of config_checks.py and of the stages is under 40
    lines, and a stage's section is checked by its stage."""
    import ast

    for path in [ROOT / "headprune" / "config_checks.py", *(ROOT / "headprune" / "stages").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and "check" in node.name:
                assert node.end_lineno - node.lineno < 40, f"{path.name}:{node.name}"
    assert {name for name, stage in stages.STAGES.items() if hasattr(stage, "check")} >= {
        "ablation", "concrete", "dynamics", "masking_modes", "pruning", "retrieval", "speed"}
