"""No kind, family, masking, criterion, screen, layout or metric word is compared outside its own class (issue #47
item 3, issue #60).

A kind of score (headprune.evaluation.kinds), a head adapter family (headprune.models.families), a masking
mode (headprune.models.masking), a criterion (headprune.analyses.criteria), a screen (headprune.analyses.screening),
a pruning layout (headprune.analyses.layouts) and a metric (headprune.evaluation.metrics) each answer for
themselves; code elsewhere that compares a config word with one of their names branches on it instead of asking the
class, and a new one would silently take the other branch. A word of two vocabularies (importance: a criterion and
a screen; uniform: a masking mode and a layout) may be compared in the files of either. This counts such comparisons in headprune/, scripts/ and benchmarks/ as the before-stop hook does
(``(==|!=|in) *\\(?"word"``, plus the word on the left of == or !=, and any string compared with a ``family``),
not subscripts such as config["translation"], nor ``for x in ("encoder", "decoder")`` loops.
"""
import re
from pathlib import Path

from headprune.analyses.criteria import CRITERIA
from headprune.analyses.layouts import LAYOUTS
from headprune.analyses.screening import SCREENS
from headprune.evaluation.kinds import KINDS
from headprune.evaluation.metrics import METRICS
from headprune.models.families import FAMILIES
from headprune.models.masking import MODES

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("headprune", "scripts", "benchmarks")

# Where each word is its own: the kinds', the families', the modes', the criteria's, the screens', the layouts' and
# the metrics' modules.
OWN = {"kind": ("headprune/evaluation/kinds/",), "family": ("headprune/models/families/",),
       "masking": ("headprune/models/masking.py",), "criterion": ("headprune/analyses/criteria.py",),
       "screen": ("headprune/analyses/screening.py",), "layout": ("headprune/analyses/layouts.py",),
       "metric": ("headprune/evaluation/metrics.py",)}
VOCABULARIES = {"kind": KINDS, "family": FAMILIES, "masking": MODES, "criterion": CRITERIA, "screen": SCREENS,
                "layout": LAYOUTS, "metric": METRICS}


# Comparisons that must be, each (file, the line's code) with why: none of them is a kind, family or mode.
ALLOWED = {
    ("headprune/evaluation/lm_tasks.py", 'if config.weight_by_size and config.aggregation == "mean" and all('):
        "lm-evaluation-harness's aggregation called mean, not the masking mode",
    ("headprune/models/fairseq/weights.py",
     'if len(parts) >= 5 and parts[0] in ("encoder", "decoder") and parts[1] == "layers" and parts[3] == "layer_norms":'):
        "fairseq's state-dict key prefixes, not the head adapter families",
    ("headprune/models/fairseq/weights.py",
     'renames = _ENCODER_OLD_LAYER_NORMS if parts[0] == "encoder" else _DECODER_OLD_LAYER_NORMS'):
        "fairseq's state-dict key prefixes, not the head adapter families",
    ("headprune/models/loading.py",
     'return json.loads((path / "config.json").read_text()).get("model_type") == "fsmt" or (path / "vocab-src.json").exists()'):
        "a folder converted from fairseq is told by its config.json before any family (and its torch code) is imported",
    ("benchmarks/speed.py", 'elif args.model == "fsmt":'):
        "the benchmark's --model choice, not the family of a loaded model (build() asks the model after this)",
    ("benchmarks/llama_cpp_speed.py", 'if name == "random":'):
        "the benchmark's randomly initialized model, not the random criterion",
    ("headprune/report/figures/retrieval.py", 'if selection == "random":'):
        "retrieval_heads.csv's selection of K random heads, not the random criterion",
    ("headprune/report/claims/wu.py",
     'top, random_sets = at_k[at_k.selection == "top"].iloc[0], at_k[at_k.selection == "random"]'):
        "retrieval_heads.csv's selection of K random heads, not the random criterion",
}
# TODO(#47): the benchmarks' hand-made studies (a folder, windows, items or a tsv; not the config's specs a kind's
# load_evalset reads) are built by kind here, and the lm_eval study is also timed by lm-eval's own HFLM.
ALLOWED_FILES = {
    "benchmarks/sweep_worker.py": "hand-made benchmark studies, and lm-eval's HFLM timed beside an lm_eval study",
    "benchmarks/ablation_sweep.py": "the label of lm-eval's HFLM evaluation, timed beside an lm_eval study",
}


def _words() -> dict[str, tuple[str, ...]]:
    """Each word, and every vocabulary it is a word of."""
    words: dict[str, tuple[str, ...]] = {}
    for what, registry in VOCABULARIES.items():
        for word in registry:
            words[word] = words.get(word, ()) + (what,)
    return words


def comparisons(text: str, words: dict):
    """(line number, line, what the word is: one vocabulary or several) of every comparison with one of ``words`` in
    ``text``."""
    names = "|".join(map(re.escape, words))
    compared = re.compile(rf"""(?:==|!=|\bin)\s*\(?\s*["']({names})["']|["']({names})["']\s*(?:==|!=)"""
                          rf"""|\bfamily\s*(?:==|!=)\s*["'](\w+)["']""")
    loop = re.compile(r"\bfor\s+[^:]+?\s+in\s*\(")
    for number, line in enumerate(text.splitlines(), 1):
        loops = [m.span() for m in loop.finditer(line)]
        for match in compared.finditer(line):
            if any(start <= match.start() < end for start, end in loops):
                continue
            word = next(group for group in match.groups() if group)
            yield number, line.strip(), words.get(word, ("family",))


def test_the_scan_counts_comparisons_not_subscripts_or_loops():
    words = {"translation": "kind", "zero": "masking", "encoder": "family"}
    text = '\n'.join(['if kind == "translation":', 'config["translation"]["beam"]', 'x = "zero" != word',
                      'if word in ("zero", "uniform"):', 'for side in ("encoder", "decoder"):',
                      'if family != "bert":', 'return {"kind": "translation"}'])
    assert [(n, what) for n, _, what in comparisons(text, words)] == [(1, "kind"), (3, "masking"), (4, "masking"),
                                                                   (6, ("family",))]


def test_no_vocabulary_word_is_compared_outside_its_own_class():
    words = _words()
    found, allowed_seen = [], set()
    for root in SCANNED:
        for path in sorted((ROOT / root).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in ALLOWED_FILES:
                continue
            for number, line, whats in comparisons(path.read_text(encoding="utf-8"), words):
                if any(name.startswith(OWN[what]) for what in whats):
                    continue
                if (name, line) in ALLOWED:
                    allowed_seen.add((name, line))
                    continue
                found.append(f"{name}:{number}: {line}  (a {' or '.join(whats)} word: ask its class)")
    assert not found, "\n".join(found)
    assert allowed_seen == set(ALLOWED), f"allowed but gone (drop them): {set(ALLOWED) - allowed_seen}"
