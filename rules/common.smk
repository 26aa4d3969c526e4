"""Config validation, the study list, and the input functions every rule file uses."""
import functools
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
MODELS = config.get("models", {})  # any model by config: one study each
CORPORA = config.get("corpora", {})
STUDIES = [TRANSLATION, *GLUE, *MODELS]
# What a study's model is scored on decides its attention types: an encoder-decoder translates, an
# encoder classifies, a decoder-only LM predicts the next token.
ATTENTION_TYPES = {"translation": ["enc_self", "enc_dec", "dec_self"], "classification": ["enc_self"],
                   "language_modeling": ["dec_self"]}


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
    for study, entry in MODELS.items():
        if study == TRANSLATION or study in GLUE:
            raise ValueError(f"config: models.{study} has the name of another study (translation.name or a glue task)")
        needs = {"classification": "task", "language_modeling": "corpus"}.get(entry["kind"])
        if needs and needs not in entry:
            raise ValueError(f"config: models.{study} is a {entry['kind']} study: it needs '{needs}'")
        if entry["kind"] == "classification" and entry["task"] not in GLUE:
            raise ValueError(f"config: models.{study}.task names '{entry['task']}', which is not a glue entry")
        if entry["kind"] == "language_modeling":
            corpus = CORPORA.get(entry["corpus"])
            if corpus is None:
                raise ValueError(f"config: models.{study}.corpus names '{entry['corpus']}', which is not in corpora")
            splits = list(corpus["files"]) if "files" in corpus else corpus.get("splits", ["train", "validation", "test"])
            for key, default in LM_SPLITS.items():
                if entry.get(key, default) not in splits:
                    raise ValueError(f"config: models.{study}.{key} is '{entry.get(key, default)}', "
                                     f"not one of corpora.{entry['corpus']}.splits {splits}")
    for experiment in ("cross_domain", "head_roles", "glue_pruning"):
        for study in config["experiments"].get(experiment, []):
            if study in MODELS and MODELS[study]["kind"] == "language_modeling":
                raise ValueError(f"config: experiments.{experiment} names '{study}', a language-modelling study "
                                 f"({'no out-of-domain corpus' if experiment == 'cross_domain' else 'encoder heads only' if experiment == 'head_roles' else 'glue tasks only'})")
    if TRANSLATION in config["experiments"].get("glue_pruning", []):
        raise ValueError(f"config: experiments.glue_pruning names '{TRANSLATION}', the translation study; "
                         "Figure 6 is for glue tasks (Figure 3 draws the translation model's pruning)")


# The splits of a language-modelling study's corpus, by role, and their defaults.
LM_SPLITS = {"eval_split": "test", "selection_split": "validation", "test_split": "test", "importance_split": "train"}

_check_config()


# --- resources ---------------------------------------------------------------------------


def resource(rule_name, key):
    """config.resources.<rule>.<key>, falling back to config.resources.default."""
    merged = {**config["resources"]["default"], **config["resources"].get(rule_name, {})}
    return merged.get(key, 0 if key == "gpu" else None)


def study_resource(rule_name, key):
    """As resource(), for the jobs of one study (a {study} wildcard), with models.<study>.resources.<rule> (or .default) over
    config.resources, so one large model's jobs can ask for more GPUs, memory and time than the rest."""
    return functools.partial(resource_of_study, rule_name, key)


def resource_of_study(rule_name, key, wildcards):
    own = MODELS.get(wildcards.study, {}).get("resources", {})
    merged = {**config["resources"]["default"], **config["resources"].get(rule_name, {}),
              **own.get("default", {}), **own.get(rule_name, {})}
    return merged.get(key, 0 if key == "gpu" else None)


def rule_threads(rule_name, default):
    """config.resources.<rule>.threads, else the rule's own default (Snakemake caps it at --cores;
    SLURM gets it as --cpus-per-task)."""
    return config["resources"].get(rule_name, {}).get("threads", default)


# --- studies -----------------------------------------------------------------------------


def study_kind(study):
    """translation (BLEU), classification (a glue task's metric) or language_modeling (perplexity)."""
    if study == TRANSLATION:
        return "translation"
    return "classification" if study in GLUE else MODELS[study]["kind"]


def study_arch(study):
    """The config section that declares a study's layers and heads (and how errors name it)."""
    if study == TRANSLATION:
        return config["translation"], "translation"
    if study in GLUE:
        return config["bert"], "bert"
    return MODELS[study], f"models.{study}"


def study_task(study):
    """The glue entry whose data a classification study uses."""
    return study if study in GLUE else MODELS[study]["task"]


def study_heads(study):
    """Every head of a study's model as 'attn_type-layer-head', known from the config alone."""
    arch = study_arch(study)[0]
    return [f"{t}-{layer}-{head}" for t in ATTENTION_TYPES[study_kind(study)]
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


def fetched_model_folder(study):
    """Where fetch_model puts a models entry's source (hub snapshot or extracted tarball)."""
    return f"{DATA}/models/{study}"


def finetuned_by_pipeline(study):
    """A classification study whose model the pipeline fine-tunes: every glue task (on bert.pretrained),
    and a models entry with finetune: true (on its source)."""
    return study in GLUE or (study_kind(study) == "classification" and MODELS[study].get("finetune", True) is not False)


def model_path(study):
    if study == TRANSLATION:
        return translation_model_folder()
    if finetuned_by_pipeline(study):
        return f"{RESULTS}/models/{study}"
    return fetched_model_folder(study)


def corpus_dir(corpus):
    """fetch_corpus writes each split of a corpus here as {split}.txt."""
    return f"{DATA}/corpora/{corpus}"


def windows_dir(study):
    """tokenize_corpus writes here each corpus split a language model uses, tokenized once and cut into
    its windows (windows_file); the jobs take the folder as their input."""
    return f"{DATA}/windows/{study}"


def windows_file(study, split):
    return f"{windows_dir(study)}/{split}.npy"


def lm_split(study, key):
    return MODELS[study].get(key, LM_SPLITS[key])


# The test sets a study is evaluated on, by role: "eval" (Table 1, pruning), "ood"
# (cross-domain, Figure 2), "selection" and "test" (one head per layer, Tables 2-3).
ROLES = ("eval", "ood", "selection", "test")


def evalset_name(study, role):
    """The test set (translation), split (GLUE) or corpus split (language modelling) that plays ``role``."""
    if study_kind(study) == "language_modeling":
        if role == "ood":
            raise ValueError(f"config: {study} is a language-modelling study: it has no out-of-domain set")
        return lm_split(study, f"{role}_split")
    if study_kind(study) == "translation":
        t = config["translation"]
        key = {"eval": "eval_set", "ood": "ood_set", "selection": "selection_set", "test": "test_set"}[role]
        section = "translation"
        name = t.get(key)
    else:
        entry = GLUE[study_task(study)]
        key = {"eval": "eval_split", "ood": "ood_split", "selection": "selection_split", "test": "test_split"}[role]
        section = f"glue.{study_task(study)}"
        name = entry.get(key, {"eval": "dev", "selection": "train", "test": entry.get("eval_split", "dev")}.get(role))
    if name is None:
        raise ValueError(f"config: {section}.{key} is needed for the '{role}' evaluation of {study}")
    return name


def evalset_spec(study, role="eval"):
    """What a script needs to build a study's test set (headprune.workflow.load_evalset)."""
    name = evalset_name(study, role)
    kind = study_kind(study)
    if kind == "translation":
        t = config["translation"]
        source, reference = testset_files(name)
        return {"kind": "translation", "source": source, "reference": reference, "lang": t["tgt_lang"],
                "max_items": t.get("max_sentences"), "name": name}
    if kind == "language_modeling":
        # the name every table carries states the window, as the protocol asks
        return {"kind": "language_modeling", "windows": windows_file(study, name),
                "name": f"{name} ({MODELS[study]['window']}-token windows)",
                "window": MODELS[study]["window"], "max_items": MODELS[study].get("max_windows")}
    entry = GLUE[study_task(study)]
    # Tables 2-3 choose the head on 5000 training examples (a seeded subset), as the paper does.
    max_items = config["bert"].get("selection_examples") if role == "selection" else None
    return {"kind": "classification", "tsv": f"{glue_dir(study_task(study))}/{name}.tsv",
            "metric": entry.get("metric", "accuracy"), "name": name, "max_items": max_items,
            "seed": config["bert"]["finetune"]["seed"]}


def eval_settings(study, bleu, masking="zero"):
    """How a study's model is evaluated (headprune.experiments.runs.EvalSettings); ``masking`` is how a switched-off
    head is replaced: a zero output (the paper) or uniform attention over its keys."""
    kind = study_kind(study)
    rows = config["ablation"].get("variant_batch_size", {}).get(kind, 256)
    if kind == "translation":
        t = config["translation"]
        batch_size = MODELS[study].get("batch_size", t["batch_size"]) if study in MODELS else t["batch_size"]
        return {"batch_size": batch_size, "beam": t["beam"], "lenpen": t["lenpen"], "bleu": bleu, "masking": masking,
                "variant_batch_size": rows}
    if kind == "language_modeling":
        return {"batch_size": MODELS[study]["batch_size"], "masking": masking, "variant_batch_size": rows}
    batch_size = MODELS[study].get("batch_size", 64) if study in MODELS else config["bert"]["eval_batch_size"]
    return {"batch_size": batch_size, "max_length": config["bert"]["finetune"]["max_length"], "masking": masking,
            "variant_batch_size": rows}


def study_params(study):
    """Everything about a study that should rerun its jobs when it changes (what load_study_model reads)."""
    arch, section = study_arch(study)
    entry = MODELS.get(study, {})
    return {"name": study, "kind": study_kind(study), "model": model_path(study), "section": section,
            "src_lang": config["translation"]["src_lang"], "tgt_lang": config["translation"]["tgt_lang"],
            "layers": arch["layers"], "heads": arch["heads"], "device": config["device"],
            **{key: entry[key] for key in ("kv_heads", "dtype", "src_code", "tgt_code") if key in entry}}


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


def model_local_sources(wildcards):
    source = MODELS[wildcards.study]["source"]
    return local_source(source) if "url" in source else []


def corpus_local_sources(wildcards):
    corpus = CORPORA[wildcards.corpus]
    return [p for f in (corpus["files"].values() if "files" in corpus else [corpus]) for p in local_source(f)]


def study_corpus_dir(wildcards):
    return corpus_dir(MODELS[wildcards.study]["corpus"])


def corpus_params(wildcards):
    return CORPORA[wildcards.corpus]


def fetch_model_params(wildcards):
    return MODELS[wildcards.study]["source"]


def finetune_pretrained(wildcards):
    """What a classification study is fine-tuned from: bert.pretrained, or a models entry's source."""
    if wildcards.study in MODELS:
        return fetched_model_folder(wildcards.study)
    return f"{DATA}/checkpoints/bert-pretrained"


def finetune_data(wildcards):
    return glue_dir(study_task(wildcards.study))


def tokenize_params(wildcards):
    entry = MODELS[wildcards.study]
    return {"window": entry["window"], "splits": lm_needed_splits(wildcards.study)}


def lm_needed_splits(study):
    """The splits of a language model's corpus that some role of it uses (each tokenized once)."""
    return sorted({lm_split(study, key) for key in LM_SPLITS})


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
    kind = study_kind(study)
    if kind == "translation":
        return sorted({f for role in roles for f in testset_files(evalset_name(study, role))})
    if kind == "language_modeling":
        return [windows_dir(study)]
    return [glue_dir(study_task(study))]


def study_importance_data(wildcards):
    kind = study_kind(wildcards.study)
    if kind == "translation":
        return [f for name in config["translation"]["importance_sets"] for f in testset_files(name)]
    if kind == "language_modeling":
        return [windows_dir(wildcards.study)]
    return [glue_dir(study_task(wildcards.study))]


def lm_train_spec(study, batch_size, max_items):
    """Windows of a language-modelling study's importance split, as importance_batches reads them."""
    return {"kind": "language_modeling", "windows": windows_file(study, lm_split(study, "importance_split")),
            "batch_size": batch_size, "max_items": max_items}


def importance_spec(study):
    """The data Ih is estimated on: newstest2009-12 for translation, the training split for BERT, the
    first importance_windows windows of a language model's importance split."""
    kind = study_kind(study)
    if kind == "translation":
        t = config["translation"]
        return {"kind": "translation", "sets": [dict(zip(("source", "reference"), testset_files(n)))
                                                for n in t["importance_sets"]],
                "batch_size": t["importance_batch_size"], "max_items": t.get("max_sentences")}
    if kind == "language_modeling":
        return lm_train_spec(study, MODELS[study]["batch_size"], MODELS[study].get("importance_windows"))
    task = study_task(study)
    return {"kind": "classification", "tsv": f"{glue_dir(task)}/{GLUE[task].get('train_split', 'train')}.tsv",
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
    arch = study_arch(study)[0]
    return [f"{t}-{layer}" for t in ATTENTION_TYPES[study_kind(study)] for layer in range(arch["layers"])]


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
        scopes.update({t: ["importance"] for t in ATTENTION_TYPES[study_kind(study)]})
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


def glue_pruning_full(wildcards):
    """Figure 6's studies' full-model results (their model family titles the panels)."""
    return [f"{RESULTS}/{study}/full.json" for study in config["experiments"].get("glue_pruning", [])]


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
    return {"name": DYN, "kind": "translation", "section": "dynamics", "model": dynamics_checkpoint(wildcards.epoch),
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
    task = study_task(wildcards.study)
    entry = GLUE[task]
    own = MODELS.get(wildcards.study, {}).get("finetune")
    return {**config["bert"]["finetune"], **(own if isinstance(own, dict) else {}),
            "num_labels": len(glue_task_spec(task)["labels"]),
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


def table1_attention_type(wildcards):
    """Table 1 shows the encoder self-attention (the paper's); a decoder-only LM's is its only type."""
    return ATTENTION_TYPES[study_kind(wildcards.study)][0]


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
    """Only the eval set: newstest2013 (translation), the GLUE task's folder (its eval split), the LM's windows."""
    kind = study_kind(wildcards.study)
    if kind == "translation":
        return testset_files(evalset_name(wildcards.study, "eval"))
    if kind == "language_modeling":
        return [windows_dir(wildcards.study)]
    return [glue_dir(study_task(wildcards.study))]


def speed_params(wildcards):
    """The eval set (the first/seeded speed.max_items items of it) and how to time it."""
    speed = config["speed"]
    evalset = evalset_spec(wildcards.study)
    if speed.get("max_items") is not None:
        evalset["max_items"] = speed["max_items"]
    settings = {"batch_sizes": speed.get("batch_sizes", [1, 4, 16, 64]), "repeats": speed.get("repeats", 3),
                "prune_percent": speed.get("prune_percent", 50), "warmup_batches": speed.get("warmup_batches", 2)}
    kind = study_kind(wildcards.study)
    if kind == "translation":
        settings.update(beam=config["translation"]["beam"], lenpen=config["translation"]["lenpen"])
    elif kind == "language_modeling":
        settings.update(decode_tokens=speed.get("decode_tokens", 32))
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
    """The training data files of a study: translation.train_sets, the GLUE task's folder, or the windows of
    a language model's importance split."""
    kind = study_kind(wildcards.study)
    if kind == "translation":
        return [f for name in translation_train_sets() for f in testset_files(name)]
    if kind == "language_modeling":
        return study_importance_data(wildcards)
    return [glue_dir(study_task(wildcards.study))]


def train_spec(study, batch_size):
    """A study's training data as headprune.workflow.importance_batches reads it."""
    concrete = config["concrete"]
    kind = study_kind(study)
    if kind == "language_modeling":
        return lm_train_spec(study, batch_size, concrete["max_items"])
    if kind == "translation":
        return {"kind": "translation", "sets": [dict(zip(("source", "reference"), testset_files(n)))
                                                for n in translation_train_sets()],
                "batch_size": batch_size, "max_items": concrete["max_items"], "seed": concrete["seed"]}
    task = study_task(study)
    return {"kind": "classification", "tsv": f"{glue_dir(task)}/{GLUE[task].get('train_split', 'train')}.tsv",
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
    kind = study_kind(study)
    text = testset_files(evalset_name(study, "eval"))[:1] if kind == "translation" else [glue_dir(study_task(study))]
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
