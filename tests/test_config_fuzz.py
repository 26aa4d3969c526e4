"""Every shipped config (config.yaml, demo/config.yaml, configs/*.yaml) mutated many times, as a user's
typo would: a key deleted, a value made a string, a negative number, zero, a fraction, a list, null, an
empty value, an unknown key added. Each mutation must either stop before any job with a message that
names the key, or be a config whose jobs can run: no mutation may pass validation and then fail in a job.

How it is checked (about a minute on 2 cores):

* Every mutation is validated in this process by what rules/common.smk runs: snakemake.utils.validate
  against rules/schemas/config.schema.yaml (defaults filled in), then headprune.studies.Pipeline. The
  schema file is parsed once (Snakemake re-reads it on every call; that is the only shortcut). All
  mutations of the demo section are checked, and of the rest of each config a seeded sample that mutates
  every key at least once (HEADPRUNE_FUZZ_ALL=1: all of them; HEADPRUNE_FUZZ_SEED changes the sample).
* A rejected mutation must raise Snakemake's validation error or a ConfigError that names the key (its
  dotted path, or the instance path jsonschema prints; a deleted or emptied key by its name or the name
  of what it held); any other exception fails the test.
* A mutation that passes must be one a job can use. Which ones are, is decided per key, by reading the
  code that takes the value (scripts/, headprune/): the mutated config validates to the original one
  (nothing changed), or differs from it only where the schema's defaults filled in what was left out,
  or it matches an entry of USABLE below, which says why the jobs can use it. A mutation none of these
  covers fails the test ("passed validation, but nothing says a job can use it"): tighten the schema, or
  add an entry after reading the code.
* The usable mutations of each config are then applied together (each key once) and that config is
  dry-run for real (snakemake -n): the rules' input functions and parameters see every mutated value
  when the DAG is built, and it must plan its jobs. One rejected mutation per config is dry-run too, to
  show that the Snakefile stops with the same message before any job; and one of DAG_STOPS, what passes
  here and is stopped, naming its key, only when the DAG asks for it (a test set a study's experiments
  need).
* KNOWN_GAPS lists what passes here and fails in a job because only a check across sections could
  catch it (headprune.studies.Pipeline); each entry says why. The test checks that each is still a gap,
  so an entry goes away with its check.

The demo section's ranges come from scripts/demo_*.py and headprune/demo/: what each value is used as
(counts, sizes, steps, seeds, fractions of the steps) and what the functions refuse (train_tiny_llama:
steps >= 1 for its learning-rate schedule; make_tiny_bert: no pretraining without sentences, so
pretrain_steps is 0; make_classification_task: dev_examples >= 1, or MNLI has no mismatched dev set;
make_grammar_task: at least one item per split).
Constraints between demo keys (d_model a multiple of heads, hidden / heads even, heads a multiple of
kv_heads, passkey min_tokens <= max_tokens and at least the needle's tokens, the demo models' layers
and heads equal to the studies') cannot be stated in a JSON schema; no mutation here makes them false.
"""
from __future__ import annotations

import ast
import concurrent.futures
import contextlib
import copy
import fnmatch
import json
import os
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

import snakemake.utils
from snakemake.exceptions import WorkflowError

from headprune.config_schema import schema as full_schema
from headprune.config_schema import validate
from headprune.io.config_error import ConfigError
from headprune.studies import Pipeline

ROOT = Path(__file__).resolve().parents[1]
EMPTY_FOLDER = tempfile.mkdtemp(prefix="headprune-fuzz-")
CONFIGS = ["config.yaml", "demo/config.yaml", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").glob("*.yaml"))]
SEED = int(os.environ.get("HEADPRUNE_FUZZ_SEED", "34"))
EVERY_MUTATION = os.environ.get("HEADPRUNE_FUZZ_ALL") == "1"
SAMPLE = 300  # mutations of each config beyond its demo section
DRY_RUN_TIMEOUT = 300
MISSING = object()


# --- validation, as rules/common.smk does it ------------------------------------------------------------

_parse_schema_file = snakemake.utils._load_configfile
_schemas: dict[str, str] = {}


def _schema_parsed_once(source, filetype="Config"):
    if filetype != "Schema":
        return _parse_schema_file(source, filetype=filetype)
    if str(source) not in _schemas:
        _schemas[str(source)] = json.dumps(_parse_schema_file(source, filetype=filetype))
    return json.loads(_schemas[str(source)])  # a fresh copy: validate() writes into it


@pytest.fixture(scope="module", autouse=True)
def schema_parsed_once():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(snakemake.utils, "_load_configfile", _schema_parsed_once)
        yield


def plain(config):
    """A deep copy without YAML's shared anchors (a mutation changes one key, not every alias of it)."""
    return json.loads(json.dumps(config))


def load(name):
    return plain(yaml.safe_load((ROOT / name).read_text()))


@dataclass
class Verdict:
    status: str  # "rejected", "crashed" or "passed"
    message: str = ""
    validated: dict | None = None


def check(config) -> Verdict:
    config = plain(config)
    try:
        validate(config)
        with contextlib.chdir(EMPTY_FOLDER):  # local downloads are looked for here: a demo run in the checkout aside
            Pipeline(config)
    except (WorkflowError, ConfigError) as error:
        return Verdict("rejected", str(error))
    except Exception as error:  # a crash before any job, but it names nothing
        return Verdict("crashed", f"{type(error).__name__}: {error}")
    return Verdict("passed", validated=config)


# --- mutations ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mutation:
    path: tuple
    kind: str
    value: object = None
    config: str = ""

    def __str__(self):
        shown = "" if self.kind in ("delete", "unknown_key") else f" = {self.value!r}"
        return f"{self.config}: {dotted(self.path) or '<top>'} {self.kind}{shown}"


def dotted(path):
    return ".".join(str(key) for key in path)


def shape(path):
    """The path as USABLE's patterns spell it: a list item is '[]'."""
    return ".".join("[]" if isinstance(key, int) else key for key in path)


def walk(value, path=()):
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from walk(item, (*path, index))


def replacements(value):
    """(kind, new value) for one value: what a hand-edited YAML file gets wrong."""
    if isinstance(value, bool):
        kinds = [("string", str(value).lower()), ("number", 1)]
    elif isinstance(value, (int, float)):
        kinds = [("string", str(value)), ("negative", -abs(value) or -1), ("zero", type(value)(0))]
        if isinstance(value, int):
            kinds.append(("fraction", value + 0.5))
    elif isinstance(value, str):
        kinds = [("number", 7), ("empty", "")]
    elif isinstance(value, list):
        kinds = [("string", "fuzz"), ("empty", [])]
    elif isinstance(value, dict):
        kinds = [("string", "fuzz"), ("empty", {})]
    else:
        kinds = [("string", "fuzz"), ("number", 7)]
    if not isinstance(value, list):
        kinds.append(("list", [value]))
    if value is not None:
        kinds.append(("null", None))
    return kinds


def mutations(config, name):
    found = []
    for path, value in walk(config):
        if path:
            found.append(Mutation(path, "delete", config=name))
            found += [Mutation(path, kind, new, name) for kind, new in replacements(value)]
        if isinstance(value, dict):
            found.append(Mutation(path, "unknown_key", 1, name))
    return found


def get(config, path):
    for key in path:
        if not isinstance(config, (dict, list)) or (isinstance(config, dict) and key not in config):
            return MISSING
        config = config[key]
    return config


def apply(config, mutation):
    config = plain(config)
    *parent_path, last = mutation.path or (None,)
    parent = get(config, parent_path)
    if mutation.kind == "unknown_key":
        get(config, mutation.path)["fuzz_key"] = mutation.value
    elif mutation.kind == "delete":
        del parent[last]
    else:
        parent[last] = copy.deepcopy(mutation.value)
    return config


# --- does the message name the key? ------------------------------------------------------------------------

def names_key(message, mutation, original):
    path = list(mutation.path)
    while path and isinstance(path[-1], int):
        path.pop()  # a list item: the list's key
    if not path and mutation.kind != "unknown_key":
        return True
    # the dotted path as a word of its own ("demo" in data/demo/... is not the key), or jsonschema's
    # instance path (a list item's: the list's, then the index)
    if path and (re.search(rf"(?<![\w./-]){re.escape(dotted(path))}(?![\w/-])", message)
                 or "instance" + "".join(f"[{key!r}]" for key in path) in message):
        return True
    if mutation.kind == "unknown_key":
        return "'fuzz_key'" in message
    if mutation.kind in ("delete", "empty"):
        value = get(original, mutation.path)
        held = list(value) if isinstance(value, (dict, list)) else []
        words = ([] if isinstance(mutation.path[-1], int) or mutation.kind == "empty" else [mutation.path[-1]])
        return any(f"'{word}'" in message for word in words + [w for w in held if isinstance(w, str)])
    return False


# --- which mutations that pass validation a job can use ------------------------------------------------------

@dataclass(frozen=True)
class Usable:
    """Mutations of the keys ``patterns`` matches (shape(), '*' one key, '**' any keys) of kinds ``kinds``,
    which the jobs can use, and why; ``when(config, mutation)``: only then."""
    patterns: tuple
    kinds: frozenset
    why: str
    when: object = None

    def covers(self, mutation, config):
        path = shape(mutation.path).split(".") if mutation.path else []
        return (mutation.kind in self.kinds and any(_matches(p.split("."), path) for p in self.patterns)
                and (self.when is None or self.when(config, mutation)))


def _matches(pattern, path):
    if not pattern:
        return not path
    if pattern[0] == "**":
        return any(_matches(pattern[1:], path[i:]) for i in range(len(path) + 1))
    return bool(path) and fnmatch.fnmatchcase(path[0], pattern[0]) and _matches(pattern[1:], path[1:])


def usable(patterns, kinds, why, when=None):
    return Usable(tuple(patterns.split()), frozenset(kinds.split()), why, when)


def _named_by_a_role(config, mutation):
    return mutation.path[-1] in {config["translation"].get(key) for key in ("ood_set", "selection_set", "test_set")}


def _built_in_task(config, mutation):
    return "task" in get(config, mutation.path[:2])


def _files_of_a_built_in_task(config, mutation):
    return _built_in_task(config, mutation) and mutation.path[2] == "files"


USABLE = [
    # sections and keys the code reads with a fallback of its own
    usable("resources.* models.*.resources models.*.resources.*", "delete empty",
           "a rule not listed takes resources.default, over which models.<study>.resources is laid (Pipeline.resource)"),
    usable("resources.*.* models.*.resources.*.*", "delete",
           "resources.default's value; resources.default's own gpu: 0, threads: the rule's own (Pipeline.resource, "
           "Pipeline.rule_threads)"),
    usable("resources.*.gpu models.*.resources.*.gpu", "zero", "no GPU: the job runs on the CPU (device auto)"),
    usable("translation.train_sets", "delete", "Pipeline.translation_train_sets: the importance_sets"),
    usable("ablation.variant_batch_size ablation.variant_batch_size.* ablation", "delete empty",
           "a kind the config names no rows for takes as many as fit in the job's memory, at most 256 "
           "(evaluation.runs.rows_that_fit)"),
    usable("translation.ood_set translation.selection_set translation.test_set glue.*.ood_split", "delete",
           "no experiment of the study asks for that test set", when=lambda config, m: not _role_asked_for(config, m)),
    usable("translation.max_sentences dynamics.max_sentences", "delete null", "the whole test set (documented null)"),
    usable("translation.max_sentences dynamics.max_sentences bert.importance_examples bert.selection_examples "
           "models.*.max_windows models.*.importance_windows concrete.max_items roles.max_sentences speed.max_items",
           "number", "a count in range where the config had null: the first or a seeded subset of 7 items"),
    usable("translation.importance_sets.[] translation.train_sets.[]", "delete",
           "one set fewer; the others are still test sets"),
    usable("translation.testsets.*", "delete", "a test set no role names is not downloaded",
           when=lambda config, m: not _named_by_a_role(config, m)),
    usable("translation.lenpen dynamics.lenpen", "negative zero",
           "an exponent of the length (beam_search divides by length ** lenpen, length >= 1): any number"),
    usable("**.sha256 dynamics.data.md5", "delete null", "no checksum: the download is not checked (fetch takes None)"),
    usable("glue.*.url glue.*.files", "delete", "the built-in GLUE task's own download (GLUE_TASKS)",
           when=_built_in_task),
    usable("bert.importance_examples", "delete null", "the whole training set (workflow.subset takes None)"),
    usable("bert.selection_examples", "null", "every training example (workflow.subset takes None)"),
    usable("bert.finetune.epochs models.*.finetune.epochs glue.*.finetune.epochs", "fraction",
           "finetune_bert_classifier takes fractional epochs (round(epochs * batches) steps)"),
    usable("bert.finetune.warmup_fraction models.*.finetune.warmup_fraction glue.*.finetune.warmup_fraction "
           "dynamics.train.warmup_fraction",
           "zero", "at least one warmup step (max(1, int(fraction * steps)))"),
    usable("**.seed **.random_seed", "zero", "a seed like any other"),
    usable("models.*.finetune glue.*.finetune", "empty delete", "bert.finetune as it is (for a study: over its "
           "task's)"),
    usable("models.*.finetune.* glue.*.finetune.*", "delete", "bert.finetune's value (for a study: its task's)"),
    usable("models.*.kv_heads", "delete", "not checked then: the model's own key/value heads are used"),
    usable("models.*.masking", "delete", "ablation.masking and pruning.masking"),
    usable("models.*.needles_per_setting models.*.max_new_tokens models.*.answer_prefix models.*.needle "
           "models.*.question models.*.value_digits models.*.chat_template models.*.seed", "delete",
           "headprune.studies.RETRIEVAL_DEFAULTS"),
    usable("models.*.answer_prefix", "empty", "no prefix, the default"),
    usable("models.*.source_prefix", "empty", "translation: no prefix before the sources (load_seq2seq)"),
    usable("models.*.num_fewshot", "delete zero", "lm_eval: zero-shot, the default (a count of examples, 0 and up)"),
    usable("models.*.limit", "delete null", "lm_eval: every item of the task (documented null)"),
    usable("models.*.limit", "number", "lm_eval: the task's first items, a count of 1 or more"),
    usable("models.*.fewshot_seed models.*.selection_task", "delete", "lm_eval: 1234 (lm-eval's), the task itself"),
    usable("models.*.context_lengths.[] models.*.depths.[] concrete.penalties.[] speed.batch_sizes.[] "
           "retrieval_heads.k.[] pruning.orders.[] pruning.layouts.[] dynamics.train.checkpoint_epochs.[]", "delete",
           "one setting fewer, each its own items or jobs (the list stays non-empty and in order)"),
    usable("models.*.depths.[]", "zero fraction", "a depth in percent of the haystack, 0..100"),
    usable("models.*.max_windows models.*.importance_windows concrete.max_items roles.max_sentences "
           "speed.max_items", "null", "all of them (documented null)"),
    usable("criteria criteria.per_study", "delete empty", "every study compares criteria.compare (the schema's "
           "defaults; the oracle order then makes a study's single-head ablation a job of its own)"),
    usable("criteria.per_study.*", "delete",
           "criteria.compare (the oracle order then makes the study's single-head ablation a job of its own)"),
    usable("criteria.per_study.*.[]", "delete", "one criterion fewer"),
    usable("recovery.per_study.*.*", "delete", "the recovery section's own value, every study's (stages.recovery.section_of)"),
    usable("criteria.combined.entropy_weight", "zero", "a weight in 0..1: the importance alone"),
    usable("experiments.*", "empty", "no study runs that experiment"),
    usable("experiments.*.[] speed.studies.[]", "delete", "one study fewer"),
    usable("speed", "delete", "no speed study (Pipeline.speed_studies reads it with a fallback)"),
    usable("speed.studies", "empty", "no speed study"),
    usable("pruning.step_percent speed.prune_percent", "fraction",
           "a percent of the heads: round(percent * N / 100) heads (pruning_steps, heads_to_prune)"),
    usable("speed.warmup_batches", "zero", "no untimed batch"),
    usable("streaming.sink", "zero", "no attention sink kept, only the recent tokens"),
    usable("figures figures.style", "delete empty", "headprune.report.figures.DEFAULT_STYLE"),
    usable("figures.style.*", "delete", "headprune.report.figures.DEFAULT_STYLE's value"),
    usable("figures.style.font_size", "fraction", "a point size"),
    usable("dynamics", "delete", "no Figure 5 (stages.dynamics.of(pipeline) is None)"),
    usable("dynamics.expected_sizes", "delete null empty unknown_key",
           "compared only for a warning (prepare_iwslt_data)"),
    usable("dynamics.expected_sizes.*", "delete zero", "compared only for a warning (prepare_iwslt_data)"),
    usable("dynamics.bpe_merges", "zero", "no merges: subwords are characters (learn_bpe, FSMTTokenizer take it)"),
    usable("dynamics.train.*", "delete", "train_translation_model's own default (the train section is its options)"),
    usable("dynamics.train.clip_norm", "null zero", "no clipping (train_translation_model: if clip_norm)"),
    usable("dynamics.train.max_tokens", "null", "batches of batch_size sentences"),
    usable("dynamics.train.dropout dynamics.train.label_smoothing dynamics.train.warmup_init_lr "
           "dynamics.train.weight_decay dynamics.train.betas.[]", "zero", "0 is in range for each"),
    usable("demo.language_model.passkey", "delete", "no passkey documents (train_tiny_llama takes passkey=None)"),
    usable("demo.language_model.passkey.batch_size", "zero",
           "no passkey documents; the text's windows train alone (demo.language_model.batch_size > 0)"),
    usable("demo.language_model.batch_size", "zero",
           "passkey documents only: train_tiny_llama allows it while passkey.batch_size > 0"),
    usable("demo.language_model.passkey.ramp demo.language_model.passkey.windows_after", "zero",
           "a fraction of the steps: from the first step on"),
    usable("demo.language_model.passkey.answer_weight demo.language_model.passkey.first_weight "
           "demo.language_model.passkey.tokenizer_texts", "zero", "0 is in range (a loss weight, a count of texts)"),
    usable("demo.language_model.max_positions", "null", "4 windows (train_tiny_llama)"),
]

def _role_asked_for(config, mutation):
    """Whether an experiment of the study asks for the test set (split) this key names."""
    section, *_, key = mutation.path
    study = config["translation"]["name"] if section == "translation" else mutation.path[1]
    experiment = {"ood": "cross_domain", "selection": "one_head_per_layer", "test": "one_head_per_layer"}[
        key.split("_")[0]]
    return study in config["experiments"].get(experiment, [])


# What passes validation here and stops when the DAG is built, with a ConfigError that names the key: a test set
# or split that only the experiments a study takes part in ask for (Study.evalset_name). One of each config's
# is dry-run to show it (HEADPRUNE_FUZZ_ALL=1: all).
DAG_STOPS = [
    usable("translation.ood_set translation.selection_set translation.test_set glue.*.ood_split", "delete",
           "Study.evalset_name: 'config: <key> is needed for the <role> evaluation of <study>'",
           when=_role_asked_for),
]

# What passes validation and fails in a job, or stops the DAG without naming the key, because only a check
# across sections could catch it. Each is a check for headprune.config_checks.check_config to make.
KNOWN_GAPS = []  # none left: headprune.studies.Pipeline checks what crosses sections


def known_gap(mutation, config):
    return next((gap.why for gap, _ in KNOWN_GAPS if gap.covers(mutation, config)), None)


def only_defaults_differ(mutated, validated, original_validated):
    """Whether ``validated`` (``mutated`` validated) differs from the original config, validated, only
    where ``mutated`` left a key out and the schema's default filled it in."""
    def differences(a, b, path=()):
        if isinstance(a, dict) and isinstance(b, dict):
            for key in a.keys() | b.keys():
                yield from differences(a.get(key, MISSING), b.get(key, MISSING), (*path, key))
        elif a != b:
            yield path
    return all(get(mutated, path) is MISSING and get(validated, path) is not MISSING
               for path in differences(validated, original_validated))


# --- the fuzzing, once for all tests ---------------------------------------------------------------------------

@dataclass
class Fuzzed:
    name: str
    original: dict
    checked: int = 0
    rejected: list = field(default_factory=list)  # (mutation, message)
    unnamed: list = field(default_factory=list)  # (mutation, message): rejected without naming the key
    crashed: list = field(default_factory=list)  # (mutation, message)
    unexplained: list = field(default_factory=list)  # mutations that passed with nothing saying they are usable
    gaps: list = field(default_factory=list)  # (mutation, why)
    dag_stops: list = field(default_factory=list)  # mutations stopped when the DAG is built
    usable: list = field(default_factory=list)  # mutations that passed and the jobs can use


def chosen(found, name):
    """Every mutation of the demo section; of the rest, one of each key (a list's items count as one key),
    then others up to SAMPLE."""
    if EVERY_MUTATION:
        return found
    draw = random.Random(f"{SEED}:{name}")
    demo = [m for m in found if m.path[:1] == ("demo",)]
    rest = [m for m in found if m.path[:1] != ("demo",)]
    draw.shuffle(rest)
    one_each = list({shape(m.path): m for m in rest}.values())
    taken = {id(m) for m in one_each}
    others = [m for m in rest if id(m) not in taken]
    return demo + one_each + others[:max(0, SAMPLE - len(one_each))]


def fuzz(name) -> Fuzzed:
    original = load(name)
    verdict = check(original)
    assert verdict.status == "passed", f"{name} itself: {verdict.message}"
    result = Fuzzed(name, original)
    for mutation in chosen(mutations(original, name), name):
        result.checked += 1
        mutated = apply(original, mutation)
        outcome = check(mutated)
        if outcome.status == "rejected":
            named = names_key(outcome.message, mutation, original)
            (result.rejected if named else result.unnamed).append((mutation, outcome.message))
        elif outcome.status == "crashed":
            result.crashed.append((mutation, outcome.message))
        elif (why := known_gap(mutation, original)) is not None:
            result.gaps.append((mutation, why))
        elif any(entry.covers(mutation, original) for entry in DAG_STOPS):
            result.dag_stops.append(mutation)
        elif (outcome.validated == verdict.validated
              or only_defaults_differ(mutated, outcome.validated, verdict.validated)
              or any(entry.covers(mutation, original) for entry in USABLE)):
            result.usable.append(mutation)
        else:
            result.unexplained.append(mutation)
    return result


@pytest.fixture(scope="module")
def fuzzed(schema_parsed_once):
    return {name: fuzz(name) for name in CONFIGS}


def report(rows, limit=15):
    lines = [f"  {row}" if isinstance(row, Mutation) else f"  {row[0]}\n      {row[1][:300]!r}" for row in rows]
    more = f"\n  ... and {len(lines) - limit} more" if len(lines) > limit else ""
    return f"{len(lines)}:\n" + "\n".join(lines[:limit]) + more


def test_the_shipped_configs_are_fuzzed_widely(fuzzed):
    for name, result in fuzzed.items():
        assert result.checked >= min(SAMPLE, 100), name
        if not EVERY_MUTATION:  # every key of the config mutated at least once
            keys = {shape(m.path) for m in mutations(result.original, name)}
            assert keys == {shape(m.path) for m in chosen(mutations(result.original, name), name)}, name
        assert result.rejected and result.usable, name
    # every key of the demo section got every mutation
    demo = fuzzed["demo/config.yaml"]
    keys = {m.path for m in mutations(demo.original, "") if m.path[:1] == ("demo",)}
    seen = {m.path for m, _ in demo.rejected + demo.unnamed + demo.crashed + demo.gaps} | {
        m.path for m in demo.usable + demo.unexplained + demo.dag_stops}
    assert keys <= seen


def test_a_rejected_mutation_names_its_key(fuzzed):
    unnamed = [row for result in fuzzed.values() for row in result.unnamed]
    assert not unnamed, "rejected without naming the key " + report(unnamed)


def test_no_mutation_crashes_the_validation(fuzzed):
    crashed = [row for result in fuzzed.values() for row in result.crashed]
    assert not crashed, "crashed instead of naming the key " + report(crashed)


def test_a_mutation_that_passes_validation_is_one_the_jobs_can_use(fuzzed):
    unexplained = [m for result in fuzzed.values() for m in result.unexplained]
    assert not unexplained, ("passed validation, but nothing says a job can use it (tighten the schema, or "
                             "read the code that takes the value and add it to USABLE) " + report(unexplained))


# --- dry runs of the real workflow --------------------------------------------------------------------------------

def dry_run(config, path):
    """snakemake -n with ``config``, in a folder of its own: what this checkout has made (the demo's data, a
    run's results) neither hides a missing input nor is touched."""
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    workdir = path.with_suffix("")
    workdir.mkdir()
    result = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--configfile", str(path), "--directory",
                             str(workdir)], cwd=ROOT, capture_output=True, text=True, timeout=DRY_RUN_TIMEOUT)
    return result.returncode, result.stdout, result.stdout + result.stderr


def footprint(mutation):
    """The keys a mutation touches: a list item's index moves when another item goes, so its whole list."""
    path = mutation.path
    return next((path[:i] for i, key in enumerate(path) if isinstance(key, int)), path)


def composite(result):
    """The original config with every usable mutation applied (each key once; one that makes the
    whole invalid with the others is left out), and the mutations applied."""
    config, applied = result.original, []
    for mutation in result.usable:
        mine = footprint(mutation)
        if any(mine[:len(other)] == other or other[:len(mine)] == mine for other in map(footprint, applied)):
            continue
        candidate = apply(config, mutation)
        if check(candidate).status == "passed":
            config, applied = candidate, [*applied, mutation]
    return config, applied


@pytest.fixture(scope="module")
def dry_runs(fuzzed, tmp_path_factory):
    """Dry runs, two at a time: each config's composite of usable mutations, one of its rejected mutations and
    one of its DAG_STOPS mutations (HEADPRUNE_FUZZ_ALL=1: every one)."""
    folder = tmp_path_factory.mktemp("fuzz")

    def run(name, what, config, mutations):
        return mutations, dry_run(config, folder / f"{name.replace('/', '_')}_{what}.yaml")

    jobs = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for name, result in fuzzed.items():
            config, applied = composite(result)
            jobs[("composite", name)] = pool.submit(run, name, "composite", config, applied)
            picks = random.Random(f"{SEED}:{name}")
            singles = [("rejected", picks.choice(result.rejected)[0])]
            stops = result.dag_stops if EVERY_MUTATION else picks.sample(result.dag_stops, min(1, len(result.dag_stops)))
            singles += [("dag_stop", mutation) for mutation in stops]
            for index, (what, mutation) in enumerate(singles):
                jobs[(what, name, index)] = pool.submit(run, name, f"{what}{index}", apply(result.original, mutation),
                                                       mutation)
        return {key: job.result() for key, job in jobs.items()}


def test_the_usable_mutations_of_each_config_dry_run_together(fuzzed, dry_runs):
    for name in fuzzed:
        applied, (code, _, output) = dry_runs[("composite", name)]
        assert code == 0, (f"{name} with {len(applied)} usable mutations: the dry run failed:\n"
                           + "\n".join(f"  {m}" for m in applied) + "\n" + output[-3000:])
        assert len(applied) >= 10, name


def test_a_rejected_mutation_stops_the_workflow_before_any_job_naming_its_key(fuzzed, dry_runs):
    singles = [(key, run) for key, run in dry_runs.items() if key[0] in ("rejected", "dag_stop")]
    assert len(singles) >= len(fuzzed)
    for (what, name, _), (mutation, (code, stdout, output)) in singles:
        assert code != 0 and "Job stats" not in stdout, f"{what} {mutation}: the dry run went on\n{output[-2000:]}"
        assert names_key(output, mutation, fuzzed[name].original), f"{what} {mutation}:\n{output[-2000:]}"


# --- the known gaps, and the issue's own cases ----------------------------------------------------------------------

@pytest.mark.parametrize("example, message", [
    # once known gaps (passed here, failed in a job), now Pipeline's checks across sections
    (Mutation(("translation", "ood_set"), "empty", "", "config.yaml"), "translation.ood_set names ''"),
    (Mutation(("translation", "testsets", "mtnt"), "delete", None, "config.yaml"), "translation.ood_set names 'mtnt'"),
    (Mutation(("glue", "mnli", "eval_split"), "empty", "", "config.yaml"), "glue.mnli.eval_split is ''"),
    (Mutation(("glue", "mnli", "task"), "delete", None, "demo/config.yaml"), "config: glue.mnli.task is not set"),
    (Mutation(("glue", "mrpc", "files", "mrpc_dev_ids"), "delete", None, "demo/config.yaml"), "config: glue.mrpc:"),
    (Mutation(("data_dir",), "delete", None, "demo/config.yaml"), "that the demo does not make"),
    (Mutation(("demo",), "delete", None, "demo/config.yaml"), "a local file that is not there"),
], ids=str)
def test_a_value_only_a_check_across_sections_catches_names_its_key(example, message, schema_parsed_once):
    verdict = check(apply(load(example.config), example))
    assert verdict.status == "rejected" and message in verdict.message, verdict


@pytest.mark.parametrize("path, value, message", [
    # issue 34's three values that passed, then failed in a job
    (("demo", "translation", "heads"), [1, "x"], "[1, 'x'] is not of type 'integer'"),
    (("demo", "language_model", "passkey", "min_tokens"), None, "None is not of type 'integer'"),
    (("glue", "mrpc", "files", "msr_paraphrase_train", "sha256"), -7, "-7 is not of type 'string', 'null'"),
    (("demo", "bert", "pretrain_steps"), 100, "0 was expected"),
    (("demo", "classification", "dev_examples"), 0, "0 is less than the minimum of 1"),
    (("demo", "language_model", "steps"), 0, "0 is less than the minimum of 1"),
    (("demo", "language_model", "passkey", "ramp"), 1.5, "1.5 is greater than the maximum of 1"),
    (("demo", "language_model", "sentences", "validation"), MISSING, "'validation' is a required property"),
    (("demo", "translation", "epochs"), MISSING, "'epochs' is a required property"),
    (("demo", "seed"), -1, "-1 is less than the minimum of 0"),
    (("demo", "language_model", "widnow"), 64, "'widnow' was unexpected"),
])
def test_the_demo_section_is_checked(path, value, message, schema_parsed_once):
    config = load("demo/config.yaml")
    mutation = Mutation(path, "delete") if value is MISSING else Mutation(path, "set", value)
    verdict = check(apply(config, mutation))
    assert verdict.status == "rejected" and message in verdict.message, verdict.message
    assert names_key(verdict.message, mutation, config) or f"'{path[-1]}'" in verdict.message


def test_the_demo_needs_its_iwslt_settings_only_with_a_dynamics_section(schema_parsed_once):
    config = load("demo/config.yaml")
    del config["demo"]["dynamics"]
    verdict = check(config)
    assert verdict.status == "rejected" and "'dynamics' is a required property" in verdict.message
    del config["dynamics"]
    assert check(config).status == "passed"


def test_the_schemas_passkey_defaults_are_the_codes():
    """The schema's passkey defaults stand in for headprune.demo.models.PASSKEY_DEFAULTS (read from the source:
    importing it imports torch)."""
    tree = ast.parse((ROOT / "headprune" / "demo" / "models.py").read_text())
    code = next(ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", "") == "PASSKEY_DEFAULTS" for target in node.targets))
    schema = full_schema()
    passkey = schema["properties"]["demo"]["properties"]["language_model"]["properties"]["passkey"]["properties"]
    assert {key: spec["default"] for key, spec in passkey.items()} == code


def test_every_checksum_is_64_lowercase_hex_or_null(schema_parsed_once):
    """Every sha256 the schema takes is the one definition; every sha256 of the shipped configs (and one
    added where a config leaves it out) rejects what is not 64 lowercase hex characters, naming the key."""
    schema = full_schema()
    places = [path for path, value in walk(schema) if path and path[-1] == "sha256" and path[-2] == "properties"]
    assert len(places) >= 6
    for path in places:
        assert get(schema, path) == {"$ref": "#/definitions/sha256"}, dotted(path)
    assert schema["definitions"]["sha256"]["pattern"] == "^[0-9a-f]{64}$"
    good = "0123456789abcdef" * 4
    for name in CONFIGS:
        original = load(name)
        owners = [path[:-1] for path, _ in walk(original) if path and path[-1] == "sha256"]
        owners += [("bert", "pretrained")] + [("glue", task) for task in original["glue"]]
        assert owners, name
        for owner in owners:
            for bad in (-7, "-7", good.upper(), good[:-1], good + "0", "", [good]):
                mutation = Mutation((*owner, "sha256"), "set", bad)
                verdict = check(apply(original, mutation))
                assert verdict.status == "rejected", f"{name}: {mutation}"
                assert names_key(verdict.message, mutation, original), verdict.message
            for fine in (good, None):
                assert check(apply(original, Mutation((*owner, "sha256"), "set", fine))).status == "passed", owner


def test_a_local_download_that_is_there_passes_with_a_demo_too(schema_parsed_once):
    """A user's own archive beside the demo's: not under data_dir's upstream/, but there."""
    config = load("demo/config.yaml")
    config["glue"]["own"] = {"task": "SST-2", "url": "own/SST-2.zip", "sha256": None}
    verdict = check(config)
    assert verdict.status == "rejected" and "glue.own.url is 'own/SST-2.zip'" in verdict.message, verdict
    (Path(EMPTY_FOLDER) / "own").mkdir(exist_ok=True)
    (Path(EMPTY_FOLDER) / "own" / "SST-2.zip").write_bytes(b"")
    try:
        assert check(config).status == "passed", check(config).message
    finally:
        (Path(EMPTY_FOLDER) / "own" / "SST-2.zip").unlink()
