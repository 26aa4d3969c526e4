"""Config validation, the study list, and the input functions every rule file uses."""
import json
from pathlib import Path

from snakemake.utils import validate

from headprune.data import GLUE_TASKS


# The paper's config, unless one is given (--configfile demo/config.yaml): snakemake would
# otherwise merge the two, and the demo would inherit the paper's GLUE tasks.
if not config:

    configfile: "config.yaml"



validate(config, "schemas/config.schema.yaml")

DATA = config["data_dir"]
RESULTS = config["results_dir"]
FIGURES = f"{RESULTS}/figures"
ENV = "../envs/headprune.yaml"

TRANSLATION = config["translation"]["name"]
GLUE = config["glue"]
STUDIES = [TRANSLATION, *GLUE]
ATTENTION_TYPES = {"fsmt": ["enc_self", "enc_dec", "dec_self"], "bert": ["enc_self"]}


def _check_config():
    """Cross-references the JSON schema cannot express; the message names the key."""
    translation = config["translation"]
    for key in ("importance_sets", "eval_set"):
        names = translation[key] if isinstance(translation[key], list) else [translation[key]]
        for name in names:
            if name not in translation["testsets"]:
                raise ValueError(f"config: translation.{key} names '{name}', which is not in translation.testsets")
    if TRANSLATION in GLUE:
        raise ValueError(f"config: glue task '{TRANSLATION}' has the same name as translation.name")
    for task, spec in GLUE.items():
        if "task" in spec and spec["task"] not in GLUE_TASKS:
            raise ValueError(f"config: glue.{task}.task is '{spec['task']}', not one of {sorted(GLUE_TASKS)}")
        if "task" not in spec and not ({"url", "files"} & set(spec)):
            raise ValueError(f"config: glue.{task} needs either 'task' (a built-in GLUE task) or 'url' or 'files'")
    for experiment, studies in config["experiments"].items():
        for study in studies:
            if study not in STUDIES:
                raise ValueError(f"config: experiments.{experiment} names '{study}', "
                                 f"which is neither translation.name nor a glue task ({STUDIES})")


_check_config()


# --- resources ---------------------------------------------------------------------------


def resource(rule_name, key):
    """config.resources.<rule>.<key>, falling back to config.resources.default."""
    merged = {**config["resources"]["default"], **config["resources"].get(rule_name, {})}
    return merged.get(key, 0 if key == "gpu" else None)


# --- studies -----------------------------------------------------------------------------


def family(study):
    return "fsmt" if study == TRANSLATION else "bert"


def study_heads(study):
    """Every head of a study's model as 'attn_type-layer-head', known from the config alone."""
    arch = config["translation"] if family(study) == "fsmt" else config["bert"]
    return [f"{t}-{layer}-{head}" for t in ATTENTION_TYPES[family(study)]
            for layer in range(arch["layers"]) for head in range(arch["heads"])]


def glue_task_spec(task):
    """The full data spec of a glue entry: a built-in GLUE task, overridden by the entry's keys."""
    entry = dict(GLUE[task])
    spec = dict(GLUE_TASKS[entry.pop("task")]) if "task" in entry else {}
    for key in ("metric", "eval_split", "ood_split", "train_split"):
        entry.pop(key, None)
    spec.update(entry)
    spec.setdefault("name", task)
    return spec


def testset_files(name):
    lang = config["translation"]
    return [f"{DATA}/testsets/{name}.{lang['src_lang']}", f"{DATA}/testsets/{name}.{lang['tgt_lang']}"]


def model_path(study):
    if family(study) == "fsmt":
        return f"{DATA}/checkpoints/{TRANSLATION}.tar.bz2"
    return f"{RESULTS}/models/{study}"


def evalset_spec(study, which="eval"):
    """What a script needs to build a study's test set (headprune.experiments.load_evalset)."""
    if family(study) == "fsmt":
        t = config["translation"]
        name = t["eval_set"] if which == "eval" else which
        source, reference = testset_files(name)
        return {"kind": "translation", "source": source, "reference": reference, "lang": t["tgt_lang"],
                "max_items": t.get("max_sentences"), "name": name}
    entry = GLUE[study]
    split = entry.get("eval_split", "dev") if which == "eval" else which
    return {"kind": "classification", "tsv": f"{glue_dir(study)}/{split}.tsv",
            "metric": entry.get("metric", "accuracy"), "name": split}


def eval_settings(study, bleu):
    if family(study) == "fsmt":
        t = config["translation"]
        return {"batch_size": t["batch_size"], "beam": t["beam"], "lenpen": t["lenpen"], "bleu": bleu}
    return {"batch_size": config["bert"]["eval_batch_size"], "max_length": config["bert"]["finetune"]["max_length"]}


def study_params(study):
    """Everything about a study that should rerun its jobs when it changes."""
    arch = config["translation"] if family(study) == "fsmt" else config["bert"]
    return {"name": study, "family": family(study), "model": model_path(study),
            "src_lang": config["translation"]["src_lang"], "tgt_lang": config["translation"]["tgt_lang"],
            "layers": arch["layers"], "heads": arch["heads"], "device": config["device"]}


def demo_testset_files():
    """Where the demo writes its test sets: the URLs demo/config.yaml gives them."""
    return [spec[key]["url"] for spec in config["translation"]["testsets"].values() for key in ("source", "reference")]


# --- input functions ---------------------------------------------------------------------


def local_source(download):
    """A download whose URL is a path in this workflow (the demo's models) is a rule input."""
    url = download["url"]
    return [] if "://" in url else [url]


def testset_local_sources(wildcards):
    spec = config["translation"]["testsets"][wildcards.testset]
    return [p for key in ("source", "reference") if key in spec for p in local_source(spec[key])]


def glue_local_sources(wildcards):
    spec = glue_task_spec(wildcards.task)
    sources = local_source(spec) if "url" in spec else []
    return sources + [p for f in spec.get("files", {}).values() for p in local_source(f)]


def pretrained_translation_local_sources(wildcards):
    return local_source(config["translation"]["checkpoint"])


def pretrained_local_sources(wildcards):
    pretrained = config["bert"]["pretrained"]
    return local_source(pretrained) if "url" in pretrained else []


def study_of(wildcards):
    return study_params(wildcards.study)


def study_model(wildcards):
    return model_path(wildcards.study)


def glue_dir(task):
    """prepare_glue writes every split of a task into this folder: {split}.tsv."""
    return f"{DATA}/glue/{task}"


def study_eval_data(wildcards):
    if family(wildcards.study) == "fsmt":
        return testset_files(config["translation"]["eval_set"])
    return [glue_dir(wildcards.study)]


def study_importance_data(wildcards):
    if family(wildcards.study) == "fsmt":
        return [f for name in config["translation"]["importance_sets"] for f in testset_files(name)]
    return [glue_dir(wildcards.study)]


def importance_spec(study):
    """The data Ih is estimated on: newstest2009-12 for translation, the training split for BERT."""
    if family(study) == "fsmt":
        t = config["translation"]
        return {"kind": "translation", "sets": [dict(zip(("source", "reference"), testset_files(n)))
                                                for n in t["importance_sets"]],
                "batch_size": t["importance_batch_size"], "max_items": t.get("max_sentences")}
    return {"kind": "classification", "tsv": f"{glue_dir(study)}/{GLUE[study].get('train_split', 'train')}.tsv",
            "batch_size": config["bert"]["finetune"]["batch_size"],
            "max_length": config["bert"]["finetune"]["max_length"],
            "max_items": config["bert"].get("importance_examples"), "seed": config["bert"]["finetune"]["seed"]}


def ablation_outputs(wildcards):
    return expand(f"{RESULTS}/{{study}}/ablation/{{head}}.json", study=wildcards.study,
                  head=study_heads(wildcards.study))


def pruning_inputs(wildcards):
    inputs = {"importance": f"{RESULTS}/{wildcards.study}/importance.csv"}
    if "oracle" in config["pruning"]["orders"]:
        inputs["ablation"] = f"{RESULTS}/{wildcards.study}/ablation.csv"
    return inputs


def all_figures(wildcards):
    """Every table and figure the configured experiments produce (the default target)."""
    targets = []
    for study in config["experiments"]["ablation"]:
        targets += expand(f"{FIGURES}/{study}/{{name}}", name=["table1.csv", "table1.md", "figure1_bins.csv",
                                                              "figure1.png", "figure1.pdf"])
    for study in config["experiments"]["pruning"]:
        targets += [f"{FIGURES}/{study}/figure3.png", f"{FIGURES}/{study}/figure3.pdf"]
    return targets


# --- rule parameters -----------------------------------------------------------------


def testset_params(wildcards):
    return config["translation"]["testsets"][wildcards.testset]


def glue_params(wildcards):
    return glue_task_spec(wildcards.task)


def finetune_params(wildcards):
    entry = GLUE[wildcards.task]
    return {**config["bert"]["finetune"], "num_labels": len(glue_task_spec(wildcards.task)["labels"]),
            "train_split": entry.get("train_split", "train"), "eval_split": entry.get("eval_split", "dev"),
            "metric": entry.get("metric", "accuracy"), "device": config["device"]}


def importance_params(wildcards):
    return importance_spec(wildcards.study)


def full_eval_params(wildcards):
    return {"eval": evalset_spec(wildcards.study),
            "settings": eval_settings(wildcards.study, config["ablation"]["bleu"])}


def significance_params(wildcards):
    return {"eval": evalset_spec(wildcards.study), **config["significance"]}


def pruning_params(wildcards):
    return {"eval": evalset_spec(wildcards.study), "settings": eval_settings(wildcards.study, config["pruning"]["bleu"]),
            "step_percent": config["pruning"]["step_percent"], "random_seed": config["pruning"]["random_seed"]}


def pruning_order_tables(wildcards):
    return expand(f"{RESULTS}/{{study}}/pruning/{{order}}.csv", study=wildcards.study,
                  order=config["pruning"]["orders"])


def figure_style(wildcards):
    return config["figures"]["style"]
