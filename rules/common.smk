"""Config validation, the study list, and the input functions every rule file uses."""
import json
from pathlib import Path

from snakemake.utils import validate

from headprune.data.datasets import GLUE_TASKS


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
    for name in translation.get("train_sets", []):
        if name not in translation["testsets"]:
            raise ValueError(f"config: translation.train_sets names '{name}', which is not in translation.testsets")
    if TRANSLATION in config["experiments"].get("glue_pruning", []):
        raise ValueError(f"config: experiments.glue_pruning names '{TRANSLATION}', the translation study; "
                         "Figure 6 is for glue tasks (Figure 3 draws the translation model's pruning)")


_check_config()


# --- resources ---------------------------------------------------------------------------


def resource(rule_name, key):
    """config.resources.<rule>.<key>, falling back to config.resources.default."""
    merged = {**config["resources"]["default"], **config["resources"].get(rule_name, {})}
    return merged.get(key, 0 if key == "gpu" else None)


def rule_threads(rule_name, default):
    """config.resources.<rule>.threads, else the rule's own default (Snakemake caps it at --cores;
    SLURM gets it as --cpus-per-task)."""
    return config["resources"].get(rule_name, {}).get("threads", default)


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
    for key in ("metric", "eval_split", "ood_split", "train_split", "selection_split", "test_split"):
        entry.pop(key, None)
    spec.update(entry)
    spec.setdefault("name", task)
    return spec


def testset_files(name):
    lang = config["translation"]
    return [f"{DATA}/testsets/{name}.{lang['src_lang']}", f"{DATA}/testsets/{name}.{lang['tgt_lang']}"]


def translation_model_folder():
    """The fairseq checkpoint converted once into a model folder that every job loads fast."""
    return f"{DATA}/checkpoints/{TRANSLATION}.model"


def model_path(study):
    if family(study) == "fsmt":
        return translation_model_folder()
    return f"{RESULTS}/models/{study}"


# The test sets a study is evaluated on, by role: "eval" (Table 1, pruning), "ood"
# (cross-domain, Figure 2), "selection" and "test" (one head per layer, Tables 2-3).
ROLES = ("eval", "ood", "selection", "test")


def evalset_name(study, role):
    """The test set (translation) or split (GLUE) that plays ``role`` for ``study``."""
    if family(study) == "fsmt":
        t = config["translation"]
        key = {"eval": "eval_set", "ood": "ood_set", "selection": "selection_set", "test": "test_set"}[role]
        section = "translation"
        name = t.get(key)
    else:
        entry = GLUE[study]
        key = {"eval": "eval_split", "ood": "ood_split", "selection": "selection_split", "test": "test_split"}[role]
        section = f"glue.{study}"
        name = entry.get(key, {"eval": "dev", "selection": "train", "test": entry.get("eval_split", "dev")}.get(role))
    if name is None:
        raise ValueError(f"config: {section}.{key} is needed for the '{role}' evaluation of {study}")
    return name


def evalset_spec(study, role="eval"):
    """What a script needs to build a study's test set (headprune.workflow.load_evalset)."""
    name = evalset_name(study, role)
    if family(study) == "fsmt":
        t = config["translation"]
        source, reference = testset_files(name)
        return {"kind": "translation", "source": source, "reference": reference, "lang": t["tgt_lang"],
                "max_items": t.get("max_sentences"), "name": name}
    entry = GLUE[study]
    # Tables 2-3 choose the head on 5000 training examples (a seeded subset), as the paper does.
    max_items = config["bert"].get("selection_examples") if role == "selection" else None
    return {"kind": "classification", "tsv": f"{glue_dir(study)}/{name}.tsv",
            "metric": entry.get("metric", "accuracy"), "name": name, "max_items": max_items,
            "seed": config["bert"]["finetune"]["seed"]}


def eval_settings(study, bleu, masking="zero"):
    """How a study's model is evaluated (headprune.experiments.runs.EvalSettings); ``masking`` is how a switched-off
    head is replaced: a zero output (the paper) or uniform attention over its keys."""
    if family(study) == "fsmt":
        t = config["translation"]
        return {"batch_size": t["batch_size"], "beam": t["beam"], "lenpen": t["lenpen"], "bleu": bleu,
                "masking": masking}
    return {"batch_size": config["bert"]["eval_batch_size"], "max_length": config["bert"]["finetune"]["max_length"],
            "masking": masking}


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


def ablation_roles(study):
    """Test sets every single-head ablation job evaluates on: in domain, and out of domain for Figure 2."""
    return ["eval"] + (["ood"] if study in config["experiments"].get("cross_domain", []) else [])


def full_model_roles(study):
    """Test sets the full model is evaluated on: those of the ablation, and the test set of Tables 2-3."""
    return ablation_roles(study) + (["test"] if study in config["experiments"].get("one_head_per_layer", []) else [])


def study_eval_data(wildcards):
    """The test-set files a job reads, for every role it evaluates."""
    study = wildcards.study
    keys = wildcards.keys()
    roles = ("selection", "test") if "layer" in keys else ablation_roles(study) if "head" in keys \
        else ("eval",) if "order" in keys else full_model_roles(study)
    if family(study) == "fsmt":
        return sorted({f for role in roles for f in testset_files(evalset_name(study, role))})
    return [glue_dir(study)]


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


def chunk_name(items):
    """A job's name for a run of consecutive items: the item itself, or 'first..last' (a file name
    listing them all would pass the file system's 255 characters)."""
    return items[0] if len(items) == 1 else f"{items[0]}..{items[-1]}"


def chunk_items(items, name):
    """The items a chunk_name stands for."""
    first, _, last = name.partition("..")
    if first not in items or (last and last not in items):
        raise ValueError(f"'{name}' does not name a run of {items[:2]}...")
    return items[items.index(first):items.index(last or first) + 1]


def chunks(items, size):
    return [chunk_name(items[i:i + size]) for i in range(0, len(items), size)]


def ablation_jobs(study):
    """The single-head ablation jobs: one per head ('enc_self-0-3'), or with ablation.heads_per_job > 1
    a run of heads per job ('enc_self-0-0..enc_self-1-3'), each still evaluated with only that head off."""
    return chunks(study_heads(study), config["ablation"].get("heads_per_job", 1))


def ablation_job_heads(wildcards):
    return chunk_items(study_heads(wildcards.study), wildcards.head)


def ablation_outputs(wildcards):
    return expand(f"{RESULTS}/{{study}}/ablation/{{head}}.json", study=wildcards.study,
                  head=ablation_jobs(wildcards.study))


def pruning_inputs(wildcards):
    """What a prune job reads beyond the model and test set: importance.csv, the single-head ablation
    for the oracle order, the importance data for the iterative criterion."""
    orders = wildcards.order.split("+")
    inputs = {"importance": f"{RESULTS}/{wildcards.study}/importance.csv"}
    if "oracle" in orders:
        inputs["ablation"] = f"{RESULTS}/{wildcards.study}/eval/ablation.csv"
    if "iterative" in orders:
        inputs["importance_data"] = study_importance_data(wildcards)
    return inputs


def study_layers(study):
    """Every attention layer of a study's model as 'attn_type-layer'."""
    arch = config["translation"] if family(study) == "fsmt" else config["bert"]
    return [f"{t}-{layer}" for t in ATTENTION_TYPES[family(study)] for layer in range(arch["layers"])]


def one_head_jobs(study):
    """One head per layer jobs: one per layer ('enc_dec-1'), or ablation.layers_per_job layers each
    ('enc_self-0..enc_dec-1'), each layer still handled alone."""
    return chunks(study_layers(study), config["ablation"].get("layers_per_job", 1))


def one_head_job_layers(wildcards):
    return chunk_items(study_layers(wildcards.study), wildcards.layer)


def one_head_outputs(wildcards):
    return {"layers": expand(f"{RESULTS}/{{study}}/one_head/{{layer}}.json", study=wildcards.study,
                             layer=one_head_jobs(wildcards.study)),
            "full": f"{RESULTS}/{wildcards.study}/full.json"}


def criteria_of(study):
    """The head criteria compared on a study (experiments.criteria): criteria.per_study.<study>, else
    criteria.compare."""
    if study not in config["experiments"].get("criteria", []):
        return []
    return list(config["criteria"].get("per_study", {}).get(study, config["criteria"]["compare"]))


def pruning_orders(study):
    """Figure 3 prunes in every order of pruning.orders; Figure 6 (the paper's Appendix B) in the
    importance order only, so a glue_pruning task needs no single-head ablation."""
    orders = list(config["pruning"]["orders"]) if study in config["experiments"]["pruning"] else []
    if study in config["experiments"].get("glue_pruning", []) and "importance" not in orders:
        orders.insert(0, "importance")
    return orders


def pruning_scopes(study):
    """'all' (global pruning: Figures 3 and 6, and the criteria compared) and, with
    experiments.attention_types, each type (Figure 4)."""
    orders = pruning_orders(study)
    orders += [criterion for criterion in criteria_of(study) if criterion not in orders]
    scopes = {"all": orders} if orders else {}
    if study in config["experiments"].get("attention_types", []):
        scopes.update({t: ["importance"] for t in ATTENTION_TYPES[family(study)]})
    return scopes


def pruning_jobs(study):
    """(scope, orders) of every prune job: pruning.orders_per_job orders each, joined by '+'. The oracle
    order waits for the whole single-head ablation, so it has a job of its own and the other orders
    need not wait with it."""
    size = config["pruning"].get("orders_per_job", 1)
    jobs = []
    for scope, orders in pruning_scopes(study).items():
        waiting = [order for order in orders if order == "oracle"]
        ready = [order for order in orders if order != "oracle"]
        jobs += [(scope, "+".join(ready[i:i + size])) for i in range(0, len(ready), size)]
        jobs += [(scope, order) for order in waiting]
    return jobs


def cross_domain_inputs(wildcards):
    return {"in_domain": f"{RESULTS}/{wildcards.study}/eval/ablation.csv",
            "out_of_domain": f"{RESULTS}/{wildcards.study}/ood/ablation.csv"}


def glue_pruning_tables(wildcards):
    """Figure 6: the global pruning tables of each glue_pruning task (the figure draws the importance order)."""
    return [f"{RESULTS}/{study}/pruning/all/{orders}.csv" for study in config["experiments"].get("glue_pruning", [])
            for scope, orders in pruning_jobs(study) if scope == "all"]


# --- Figure 5: training dynamics (rules/dynamics.smk) -----------------------------------------
# The IWSLT model is trained by the pipeline itself; its checkpoints go through the same
# importance and pruning scripts as the studies, with these specs.

DYNAMICS = config.get("dynamics")
DYN = DYNAMICS["name"] if DYNAMICS else None
DYNAMICS_SPLITS = ("train", "valid", "test")


def _check_dynamics_config():
    if not DYNAMICS:
        return
    train = DYNAMICS["train"]
    epochs = train["checkpoint_epochs"]
    if epochs != sorted(set(epochs)) or not all(1 <= e <= train["epochs"] for e in epochs):
        raise ValueError(f"config: dynamics.train.checkpoint_epochs {epochs} must be increasing epochs "
                         f"within 1..dynamics.train.epochs ({train['epochs']})")
    if DYN in STUDIES:
        raise ValueError(f"config: dynamics.name '{DYN}' is also a study name (translation.name or a glue task)")
    for key in ("importance_set", "eval_set"):
        if DYNAMICS[key] not in DYNAMICS_SPLITS:
            raise ValueError(f"config: dynamics.{key} is '{DYNAMICS[key]}', not one of {list(DYNAMICS_SPLITS)}")
    if train.get("lr_schedule") == "inverse_sqrt" and not train.get("warmup_updates"):
        raise ValueError("config: dynamics.train.lr_schedule inverse_sqrt needs dynamics.train.warmup_updates")


_check_dynamics_config()


def dynamics_split_files(split):
    """[source, reference] of a prepared IWSLT split."""
    return [f"{DATA}/{DYN}/{split}.{DYNAMICS[lang]}" for lang in ("src_lang", "tgt_lang")]


def dynamics_prepared_files():
    """What prepare_iwslt writes (named outputs; train_dynamics takes them all as inputs)."""
    files = {f"{split}_{side}": path for split in DYNAMICS_SPLITS
             for side, path in zip(("src", "tgt"), dynamics_split_files(split))}
    files.update(bpecodes=f"{DATA}/{DYN}/bpecodes", summary=f"{DATA}/{DYN}/prepare.json",
                 **{f"dict_{side}": f"{DATA}/{DYN}/dict.{DYNAMICS[lang]}.txt"
                    for side, lang in (("src", "src_lang"), ("tgt", "tgt_lang"))})
    return files


def dynamics_archive_path():
    return f"{DATA}/raw/{DYN}/{Path(DYNAMICS['data']['url']).name}"


def dynamics_local_sources(wildcards):
    return local_source(DYNAMICS["data"])


def dynamics_prepare_settings():
    keys = ("src_lang", "tgt_lang", "lowercase", "bpe_merges", "valid_every", "test_sets", "clean", "expected_sizes")
    return {key: DYNAMICS.get(key) for key in keys}


def dynamics_model_settings():
    keys = ("name", "src_lang", "tgt_lang", "layers", "heads", "d_model", "ffn")
    return {**{key: DYNAMICS[key] for key in keys}, "device": config["device"]}


def dynamics_epochs():
    return list(DYNAMICS["train"]["checkpoint_epochs"])


def dynamics_checkpoint(epoch):
    return f"{RESULTS}/{DYN}/checkpoints/epoch{epoch}.tar.bz2"


def dynamics_checkpoints():
    return [dynamics_checkpoint(epoch) for epoch in dynamics_epochs()]


def dynamics_model(wildcards):
    return dynamics_checkpoint(wildcards.epoch)


def dynamics_study(wildcards):
    """The study dict scripts/importance.py and scripts/prune.py read, for one checkpoint epoch."""
    return {"name": DYN, "family": "fsmt", "model": dynamics_checkpoint(wildcards.epoch),
            "src_lang": DYNAMICS["src_lang"], "tgt_lang": DYNAMICS["tgt_lang"], "layers": DYNAMICS["layers"],
            "heads": DYNAMICS["heads"], "device": config["device"]}


def dynamics_importance_data(wildcards):
    return dynamics_split_files(DYNAMICS["importance_set"])


def dynamics_eval_data(wildcards):
    return dynamics_split_files(DYNAMICS["eval_set"])


def dynamics_importance_params(wildcards):
    source, reference = dynamics_split_files(DYNAMICS["importance_set"])
    return {"kind": "translation", "sets": [{"source": source, "reference": reference}],
            "batch_size": DYNAMICS["importance_batch_size"], "max_items": DYNAMICS.get("max_sentences")}


def dynamics_pruning_params(wildcards):
    source, reference = dynamics_split_files(DYNAMICS["eval_set"])
    return {"eval": {"kind": "translation", "source": source, "reference": reference, "lang": DYNAMICS["tgt_lang"],
                     "max_items": DYNAMICS.get("max_sentences"), "name": DYNAMICS["eval_set"]},
            "settings": {"batch_size": DYNAMICS["batch_size"], "beam": DYNAMICS["beam"], "lenpen": DYNAMICS["lenpen"],
                         "bleu": config["pruning"]["bleu"]},
            "step_percent": DYNAMICS.get("step_percent", config["pruning"]["step_percent"]),
            "random_seed": config["pruning"]["random_seed"]}


def dynamics_pruning_tables():
    return [f"{RESULTS}/{DYN}/epoch{epoch}/pruning_importance.csv" for epoch in dynamics_epochs()]


def dynamics_figures():
    """Figure 5 and the CSV it is drawn from; nothing without a dynamics section."""
    return expand(f"{FIGURES}/{DYN}/figure5.{{ext}}", ext=["png", "pdf", "csv"]) if DYNAMICS else []


def all_figures(wildcards):
    """Every table and figure the configured experiments produce (the default target)."""
    targets = []
    for study in config["experiments"]["ablation"]:
        targets += expand(f"{FIGURES}/{study}/{{name}}", name=["table1.csv", "table1.md", "figure1_bins.csv",
                                                              "figure1.png", "figure1.pdf"])
    for study in config["experiments"]["pruning"]:
        targets += [f"{FIGURES}/{study}/figure3.png", f"{FIGURES}/{study}/figure3.pdf"]
        if study in config["experiments"].get("attention_types", []):
            targets += [f"{FIGURES}/{study}/figure4.png", f"{FIGURES}/{study}/figure4.pdf"]
    if config["experiments"].get("glue_pruning"):
        targets += [f"{FIGURES}/figure6.png", f"{FIGURES}/figure6.pdf"]
    for study in config["experiments"].get("cross_domain", []):
        targets += expand(f"{FIGURES}/{study}/figure2.{{ext}}", ext=["png", "pdf", "csv"])
    for study in config["experiments"].get("criteria", []):
        targets += expand(f"{FIGURES}/{study}/{{name}}", name=["criteria.png", "criteria.pdf", "criteria_summary.md"])
    for study in config["experiments"].get("one_head_per_layer", []):
        targets += expand(f"{FIGURES}/{study}/one_head_per_layer.{{ext}}", ext=["csv", "md"])
    for study in config["experiments"].get("concrete", []):
        targets += [f"{RESULTS}/{study}/concrete.csv", f"{FIGURES}/{study}/concrete.png", f"{FIGURES}/{study}/concrete.pdf"]
    for study in config["experiments"].get("head_roles", []):
        targets += expand(f"{FIGURES}/{study}/{{name}}", name=["head_roles.png", "head_roles.pdf", "roles_by_step.csv",
                                                              "roles_by_step.md"])
    for study in speed_studies():
        targets += expand(f"{FIGURES}/{study}/table4.{{ext}}", ext=["csv", "md"])
    targets += dynamics_figures()
    targets += scorecard_targets()
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
    return {"roles": {role: evalset_spec(wildcards.study, role) for role in full_model_roles(wildcards.study)},
            "settings": eval_settings(wildcards.study, config["ablation"]["bleu"])}


def ablation_eval_params(wildcards):
    return {"heads": ablation_job_heads(wildcards),
            "roles": {role: evalset_spec(wildcards.study, role) for role in ablation_roles(wildcards.study)},
            "settings": eval_settings(wildcards.study, config["ablation"]["bleu"], config["ablation"]["masking"])}


def significance_params(wildcards):
    return {"eval": evalset_spec(wildcards.study, wildcards.role), **config["significance"]}


def one_head_params(wildcards):
    return {"layers": one_head_job_layers(wildcards), "selection": evalset_spec(wildcards.study, "selection"), "test": evalset_spec(wildcards.study, "test"),
            "settings": eval_settings(wildcards.study, config["ablation"]["bleu"], config["ablation"]["masking"])}


def one_head_significance_params(wildcards):
    return {"eval": evalset_spec(wildcards.study, "test"), **config["significance"]}


def pruning_params(wildcards):
    return {"eval": evalset_spec(wildcards.study), "settings": eval_settings(wildcards.study, config["pruning"]["bleu"],
                                                                          config["pruning"]["masking"]),
            "step_percent": config["pruning"]["step_percent"], "random_seed": config["pruning"]["random_seed"],
            "importance": config["importance"], "criteria": config["criteria"]["combined"],
            **({"importance_data": importance_spec(wildcards.study)} if "iterative" in wildcards.order.split("+") else {})}


def pruning_order_tables(wildcards):
    return [f"{RESULTS}/{wildcards.study}/pruning/{scope}/{orders}.csv" for scope, orders in pruning_jobs(wildcards.study)]


def criteria_inputs(wildcards):
    """The prune jobs' scores and per-step outputs that hold a study's criteria (scope 'all')."""
    jobs = [orders for scope, orders in pruning_jobs(wildcards.study) if scope == "all"
            and set(orders.split("+")) & set(criteria_of(wildcards.study))]
    return {"scores": [f"{RESULTS}/{wildcards.study}/pruning/all/{orders}.csv" for orders in jobs],
            "outputs": [f"{RESULTS}/{wildcards.study}/pruning/all/{orders}.outputs.json" for orders in jobs]}


def criteria_params(wildcards):
    return {"criteria": criteria_of(wildcards.study), "eval": evalset_spec(wildcards.study),
            "bleu": config["pruning"]["bleu"], "within": config["criteria"]["within"],
            "test_at": config["criteria"]["test_at"], "significance": config["significance"]}


def figure_style(wildcards):
    return config["figures"]["style"]


# --- speed (Table 4) ---------------------------------------------------------------------


def speed_studies():
    """Studies whose inference speed is timed with 50% of heads removed (config speed.studies)."""
    studies = config.get("speed", {}).get("studies", [])
    for study in studies:
        if study not in STUDIES:
            raise ValueError(f"config: speed.studies names '{study}', "
                             f"which is neither translation.name nor a glue task ({STUDIES})")
    return studies


speed_studies()  # a wrong name stops the run before any job


def speed_eval_data(wildcards):
    """Only the eval set: newstest2013 (translation) or the GLUE task's folder (its eval split)."""
    if family(wildcards.study) == "fsmt":
        return testset_files(evalset_name(wildcards.study, "eval"))
    return [glue_dir(wildcards.study)]


def speed_params(wildcards):
    """The eval set (the first/seeded speed.max_items items of it) and how to time it."""
    speed = config["speed"]
    evalset = evalset_spec(wildcards.study)
    if speed.get("max_items") is not None:
        evalset["max_items"] = speed["max_items"]
    settings = {"batch_sizes": speed.get("batch_sizes", [1, 4, 16, 64]), "repeats": speed.get("repeats", 3),
                "prune_percent": speed.get("prune_percent", 50), "warmup_batches": speed.get("warmup_batches", 2)}
    if family(wildcards.study) == "fsmt":
        settings.update(beam=config["translation"]["beam"], lenpen=config["translation"]["lenpen"])
    else:
        settings.update(max_length=config["bert"]["finetune"]["max_length"], padding=speed.get("padding", "max_length"))
    return {"eval": evalset, "settings": settings}


# --- beyond the paper: Hard Concrete gates and head roles (Voita et al., 2019) --------------


def penalty_name(penalty):
    """A penalty as its job's wildcard: 0.05 -> '0.05', 1e-3 -> '0.001' (read back with float())."""
    return f"{penalty:g}"


def translation_train_sets():
    t = config["translation"]
    return t.get("train_sets", t["importance_sets"])


def concrete_train_data(wildcards):
    """The training data files of a study: translation.train_sets, or the GLUE task's folder."""
    if family(wildcards.study) == "fsmt":
        return [f for name in translation_train_sets() for f in testset_files(name)]
    return [glue_dir(wildcards.study)]


def train_spec(study, batch_size):
    """A study's training data as headprune.workflow.importance_batches reads it."""
    concrete = config["concrete"]
    if family(study) == "fsmt":
        return {"kind": "translation", "sets": [dict(zip(("source", "reference"), testset_files(n)))
                                                for n in translation_train_sets()],
                "batch_size": batch_size, "max_items": concrete["max_items"], "seed": concrete["seed"]}
    return {"kind": "classification", "tsv": f"{glue_dir(study)}/{GLUE[study].get('train_split', 'train')}.tsv",
            "batch_size": batch_size, "max_length": config["bert"]["finetune"]["max_length"],
            "max_items": concrete["max_items"], "seed": concrete["seed"]}


def concrete_params(wildcards):
    study, concrete = wildcards.study, config["concrete"]
    return {"penalty": float(wildcards.penalty), "train": train_spec(study, concrete["batch_size"]),
            **{key: concrete[key] for key in ("train_model", "steps", "lr", "model_lr", "temperature", "seed", "compare")},
            "eval": evalset_spec(study), "settings": eval_settings(study, config["pruning"]["bleu"]),
            "random_seed": config["pruning"]["random_seed"], "significance": config["significance"]}


def concrete_rows(wildcards):
    return [f"{RESULTS}/{wildcards.study}/concrete/{penalty_name(p)}.csv" for p in config["concrete"]["penalties"]]


def parse_inputs(wildcards):
    """The eval set's source text, and the parser's model when stanza parses it."""
    study = wildcards.study
    text = testset_files(evalset_name(study, "eval"))[:1] if family(study) == "fsmt" else [glue_dir(study)]
    parser = [rules.fetch_parser.output[0]] if config["roles"]["parser"] == "stanza" else []
    return {"text": text, "parser": parser}


def parse_params(wildcards):
    """Which sentences are parsed (the eval set's source side, or its first text field), and by what."""
    evalset = evalset_spec(wildcards.study)
    evalset["max_items"] = config["roles"]["max_sentences"]
    return {"eval": evalset, "parser": config["roles"]["parser"], "stanza": config["roles"]["stanza"]}


def roles_params(wildcards):
    roles = config["roles"]
    return {"train": train_spec(wildcards.study, roles["batch_size"]),
            **{key: roles[key] for key in ("frequent_words", "positional_threshold", "syntactic_margin", "batch_size")}}
