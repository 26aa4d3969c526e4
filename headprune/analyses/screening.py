"""A screened single-head ablation (Table 1 at a fraction of the cost): screen every head, ablate exactly the
heads the screen ranks first and a seeded random sample of the rest, and bound what was not ablated.

Strategy (``ablation.strategy: screened``, docs/method.md "A screened Table 1"):

1. **Screen** every head from passes over data that is NOT the test set (the study's importance data), under the
   ablation's masking mode. Screens (``SCREENS``):

   - ``first_order``: attribution patching (AtP). The signed first-order estimate of the change of the mean token
     loss when the head is switched off, -(1/N) sum_t (o_h - c_h) . dL/do_h (c_h = 0 under zero masking: minus the
     gate gradient; c_h the head's constant under mean/optimal masking), ranked by its absolute value. One forward
     and one backward pass per batch.
   - ``fisher``: the empirical Fisher information of the head's gate, (1/#examples) sum_x (dL_x/dxi_h)^2 (the same
     pass; a second-moment term that first order's cancellations do not zero).
   - ``importance``: the paper's I_h, sum_t |a_t| / N (the same pass).
   - ``exact``: every head ablated exactly (the study's masking and metric, any mode) on a small screen set drawn
     from the importance data: |score - full score| there. It costs N evaluations of the screen set, i.e. (screen
     set size / test set size) of the exhaustive sweep.

2. **Verify**: the top ``top_k`` heads by screen score and a uniform random sample (``seed``) of ``sample`` of the
   other N - K heads are ablated exactly on the test set with the paired test, exactly as the exhaustive sweep
   ablates them (the same gate settings, batches and bootstrap seed: the same rows).

3. **Bound**: from the sample, an exact (Clopper-Pearson) one-sided upper confidence bound on the share of the
   N - K heads outside the top K that are significant, turned into a bound on how many of the heads that were
   screened only (N - K - R) are significant; the same for heads whose |delta| is larger than the smallest |delta|
   among the verified top K. Sampling is without replacement from a finite population, for which the binomial
   (Clopper-Pearson) bound is conservative.

Every head of a screened table keeps its row; ``verification`` says ``verified`` (top K), ``sampled`` (the random
sample) or ``screened`` (screened only: score, delta and p-values empty). A table without that column is an
exhaustive one (every head ablated).
"""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Callable, ClassVar

import numpy as np

from headprune.evaluation.runs import EvalSet, EvalSettings, HeadId, all_heads, gates_without, scored_variants
from headprune.io.registry import Registry
from headprune.models.masking import MODES

if TYPE_CHECKING:
    import pandas as pd

STRATEGIES = ("exhaustive", "screened")
# masking modes whose switched-off head is g o_h + (1 - g) c_h: the gradient screens are their first-order terms
GRADIENT_MASKINGS = tuple(word for word, mode in MODES.items() if mode.constant_output)
VERIFIED, SAMPLED, SCREENED, EXHAUSTIVE = "verified", "sampled", "screened", "exhaustive"
KEY = ["attn_type", "layer", "head"]
BOUND_COLUMNS = ("study", "testset", "table1", "screen", "heads", "verified", "sampled", "screened_only",
                 "confidence", "significant_verified", "significant_sampled", "bound_significant_unverified",
                 "effect_threshold", "larger_sampled", "bound_larger_unverified")


def head_count(value, heads: int, key: str = "ablation.screen.top_k") -> int:
    """A count of heads from the config: an integer (at most ``heads``) or a percentage of the heads ("20%").

    >>> head_count(10, 270), head_count("10%", 270), head_count(500, 8)
    (10, 27, 8)
    """
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a number of heads or a percentage like '10%', got {value!r}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{key} must be >= 0, got {value}")
        return min(value, heads)
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*%\s*", str(value))
    if not match or float(match.group(1)) > 100:
        raise ValueError(f"{key} must be a number of heads or a percentage like '10%', got {value!r}")
    return min(heads, int(round(float(match.group(1)) * heads / 100.0)))


# --- 1. screens -------------------------------------------------------------------------------------------------


class Screen:
    """A screen (``ablation.screen.method``): every head's screen scores, one column of which, named as the
    screen, ranks the heads (its magnitude: the larger, the more the head is expected to change the score). One
    class each, registered in ``SCREENS`` by its word: the schema's enum is their words (its default is the
    schema's), and no code outside the class compares one."""

    # From the one forward and backward pass over the importance data (``gradient_screens``, all of them at once):
    # the first-order terms of a masking that puts a constant in a head's place (GRADIENT_MASKINGS)
    gradient: ClassVar[bool] = False
    word: ClassVar[str]  # its word, as ``screen`` registers it
    # Whether it ablates heads on a screen set drawn from the importance data (``ablation.screen.items`` of it)
    needs_screen_set: ClassVar[bool] = False

    def scores(self, model, tokenizer, settings: EvalSettings, batches: Callable | None,
               screen_set: EvalSet | None) -> pd.DataFrame:
        """attn_type, layer, head and the screen's columns, one row per head (``batches``: a function giving the
        importance batches; ``screen_set``: the screen set, where ``needs_screen_set``)."""
        raise NotImplementedError


SCREENS: Registry[Screen] = Registry("screen", base=Screen)


def screen(name: str):
    """A class decorator registering one instance of the class as the screen ``name`` (its ``word``)."""
    def register(cls):
        cls.word = name
        SCREENS.add(name, cls())
        return cls
    return register


class GradientScreen(Screen):
    """A column of ``gradient_screens``, under a masking that puts a constant (zero, a mean) in a head's place."""
    gradient = True

    def scores(self, model, tokenizer, settings, batches, screen_set):
        if not settings.masking.constant_output:
            raise ValueError(f"ablation.screen.method {self.word} needs a masking that puts a constant in "
                             f"a head's place ({', '.join(GRADIENT_MASKINGS)}), not {settings.masking.word}")
        return gradient_screens(model, batches(), constants=getattr(settings.masking, "head_constants", None))


@screen("first_order")
class FirstOrder(GradientScreen):
    """Attribution patching: the signed first-order change of the mean token loss."""


@screen("fisher")
class Fisher(GradientScreen):
    """The gate's empirical Fisher information."""


@screen("importance")
class Importance(GradientScreen):
    """The paper's I_h."""


@screen("exact")
class Exact(Screen):
    """Every head ablated exactly on the screen set (any masking)."""
    needs_screen_set = True

    def scores(self, model, tokenizer, settings, batches, screen_set):
        return exact_screen(model, tokenizer, screen_set, settings)


def gradient_screen_names() -> list[str]:
    """The screens made by the one gradient pass."""
    return [name for name, entry in SCREENS.items() if entry.gradient]


def gradient_screens(model, batches, *, constants=None, progress: bool = False) -> pd.DataFrame:
    """The three gradient screens of every head from ONE forward and backward pass per batch: one row per head,
    attn_type, layer, head, first_order (signed: the estimated rise of the mean token loss), fisher, importance.
    ``constants`` (a ``HeadConstants``): under mean or optimal masking, the change to the head's constant.

    >>> screens = gradient_screens(model, evalset_batches(tokenizer, evalset, 8))
    >>> screens.columns.tolist()  # one row per head
    ['attn_type', 'layer', 'head', 'first_order', 'fisher', 'importance']
    """
    from headprune.scoring.importance import head_importance

    table = head_importance(model, batches, normalize=False, constants=constants, progress=progress,
                            first_order=True)
    return table.rename(columns={"importance_token": "_token"})[KEY + ["first_order", "fisher", "_token"]].rename(
        columns={"_token": "importance"})


def exact_screen(model, tokenizer, screen_set: EvalSet, settings: EvalSettings | None = None) -> pd.DataFrame:
    """Every head ablated exactly on a small screen set (never the test set): one row per head, its score there
    and ``exact`` = |score - the full model's score|. The heads share one pass (batched gate variants)."""
    import pandas as pd

    settings = settings or EvalSettings()
    heads = all_heads(model)
    full, *ablated = scored_variants(model, tokenizer, screen_set, [None] + [gates_without(model, [h]) for h in heads],
                                     settings)
    return pd.DataFrame([{"attn_type": t, "layer": layer, "head": head, "screen_score": r["score"],
                          "exact": abs(r["score"] - full["score"])} for (t, layer, head), r in zip(heads, ablated)])


def screen_scores(screens: pd.DataFrame, method: str) -> pd.DataFrame:
    """attn_type, layer, head, screen: the magnitude the heads are ranked by under ``method`` (the larger, the more
    the head is expected to change the score).

    >>> screen_scores(gradient_screens(model, evalset_batches(tokenizer, evalset, 8)), "fisher").columns.tolist()
    ['attn_type', 'layer', 'head', 'screen']
    """
    if method not in SCREENS:
        raise ValueError(f"ablation.screen.method must be one of {tuple(SCREENS)}, got {method!r}")
    if method not in screens:
        raise ValueError(f"the screen table has no column {method!r} (columns: {list(screens.columns)})")
    table = screens[KEY].copy()
    table["screen"] = screens[method].abs().to_numpy(float)
    return table


def screen_study(model, tokenizer, params: dict, batches=None, screen_set: EvalSet | None = None) -> pd.DataFrame:
    """A study's screen as the pipeline's screen job runs it (``params``: ``stages.ablation.screen_params``;
    ``batches``: a function giving the importance batches, for the gradient screens; ``screen_set``: the exact
    screen's set): every head's screen scores, ``screen`` (the method's magnitude), ``screen_rank``, ``verification``, ``screen_method``."""
    settings = EvalSettings(**params["settings"])
    method = params["method"]
    scores = SCREENS[method].scores(model, tokenizer, settings, batches, screen_set)
    n = len(scores)
    top_k = head_count(params["top_k"], n)
    selection = select_heads(screen_scores(scores, method), top_k,
                             head_count(params["sample"], n - top_k, "ablation.screen.sample"), params["seed"])
    extra = [c for c in scores.columns if c not in KEY]
    return selection.merge(scores[KEY + extra], on=KEY).assign(screen_method=method)


# --- 2. which heads are ablated -------------------------------------------------------------------------------


def select_heads(screen: pd.DataFrame, top_k: int, sample: int, seed: int) -> pd.DataFrame:
    """The screen table with ``screen_rank`` (1 = largest screen score; ties in head order) and ``verification``:
    ``verified`` for the top ``top_k``, ``sampled`` for ``sample`` heads drawn uniformly without replacement from
    the others (numpy's default_rng(seed)), ``screened`` for the rest. Same screen, K, R and seed: same heads.

    >>> import pandas as pd
    >>> screen = pd.DataFrame({"attn_type": "x", "layer": 0, "head": range(4), "screen": [0.1, 0.9, 0.5, 0.0]})
    >>> select_heads(screen, 2, 0, seed=0).verification.tolist()
    ['screened', 'verified', 'verified', 'screened']
    """
    if "screen" not in screen or not set(KEY) <= set(screen.columns):
        raise ValueError(f"a screen table needs columns {KEY + ['screen']}, got {list(screen.columns)}")
    if screen["screen"].isna().any():
        raise ValueError("the screen has no score for some heads (NaN): "
                         + ", ".join(map(str, screen.loc[screen["screen"].isna(), KEY].head(3).values.tolist())))
    n = len(screen)
    if not 0 <= top_k <= n or not 0 <= sample <= n - top_k:
        raise ValueError(f"top_k={top_k} and sample={sample} do not fit {n} heads (top_k + sample <= heads)")
    table = screen.reset_index(drop=True).copy()
    order = np.argsort(-table["screen"].to_numpy(float), kind="stable")
    rank = np.empty(n, dtype=int)
    rank[order] = np.arange(1, n + 1)
    table["screen_rank"] = rank
    verification = np.full(n, SCREENED, dtype=object)
    verification[order[:top_k]] = VERIFIED
    rest = np.sort(order[top_k:])  # the others in head order: the draw does not depend on the screen's ties
    if sample:
        verification[np.random.default_rng(seed).choice(rest, size=sample, replace=False)] = SAMPLED
    table["verification"] = verification
    return table


def heads_to_ablate(selection: pd.DataFrame) -> list[HeadId]:
    """The heads a screened sweep ablates exactly (verified and sampled), in head order."""
    rows = selection[selection["verification"].isin([VERIFIED, SAMPLED])].sort_values(KEY)
    return [(str(r.attn_type), int(r.layer), int(r.head)) for r in rows.itertuples()]


# --- 3. the bound ---------------------------------------------------------------------------------------------


def clopper_pearson_upper(successes: int, trials: int, confidence: float) -> float:
    """The exact (Clopper-Pearson) one-sided upper confidence bound on a binomial proportion: the p at which
    seeing ``successes`` or fewer in ``trials`` has probability 1 - confidence; 1 when nothing was tried or every
    trial succeeded.

    >>> round(clopper_pearson_upper(0, 20, 0.95), 4)  # 1 - 0.05 ** (1 / 20)
    0.1391
    """
    if not 0 < confidence < 1:
        raise ValueError(f"ablation.screen.confidence must be between 0 and 1, got {confidence}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials], got {successes} of {trials}")
    if trials == 0 or successes == trials:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, successes + 1, trials - successes))


def count_bound(in_sample: int, sample: int, population: int, confidence: float) -> int:
    """An upper bound, at ``confidence``, on how many of the ``population - sample`` heads NOT in the sample have
    a property that ``in_sample`` of the ``sample`` heads drawn from the population have: the Clopper-Pearson bound
    on the population's share times its size, less the ones seen, at most the heads not seen; raised to the finite
    population's exact bound (``hypergeometric_count_bound``) where that is larger. Clopper-Pearson assumes draws
    with replacement; drawn without, it is conservative but for a sliver at the extremes (215 of 216 heads with the
    property, 11 sampled: it fails with probability 0.0509 at 95%), which the exact bound closes, so the bound holds
    at its confidence for every count (tests/test_screening.py checks every count of several populations).

    >>> count_bound(0, 20, 100, 0.95)  # floor(0.1391 * 100) - 0
    13
    """
    unseen = population - sample
    if unseen <= 0:
        return 0
    share = clopper_pearson_upper(in_sample, sample, confidence)
    binomial = math.floor(share * population + 1e-9) - in_sample
    return int(min(unseen, max(0, binomial, hypergeometric_count_bound(in_sample, sample, population, confidence))))


def hypergeometric_count_bound(in_sample: int, sample: int, population: int, confidence: float) -> int:
    """The exact upper confidence bound on the unseen heads with the property for a sample drawn without replacement:
    the largest count D of the population for which seeing ``in_sample`` or fewer has probability above
    1 - confidence (hypergeometric), less the ones seen.

    >>> hypergeometric_count_bound(0, 20, 100, 0.95)
    12
    """
    from scipy.stats import hypergeom

    counts = np.arange(in_sample, in_sample + population - sample + 1)
    plausible = counts[hypergeom.cdf(in_sample, population, counts, sample) > 1 - confidence]
    return int(plausible.max() - in_sample) if len(plausible) else 0


def bound_failure_probability(count: int, population: int, sample: int, confidence: float) -> float:
    """The exact probability that ``count_bound`` falls below the true number of unseen heads with the property,
    when ``count`` of the ``population`` heads have it and ``sample`` are drawn uniformly without replacement
    (hypergeometric): at most 1 - confidence when the bound holds at its confidence.

    >>> bound_failure_probability(10, 100, 20, 0.95) <= 0.05
    True
    """
    from scipy.stats import hypergeom

    if sample == 0 or population == 0:
        return 0.0
    draws = hypergeom(population, count, sample)
    return float(sum(draws.pmf(seen) for seen in range(max(0, sample - (population - count)), min(count, sample) + 1)
                     if count_bound(seen, sample, population, confidence) < count - seen))


def table_basis(table: pd.DataFrame) -> str:
    """``exhaustive`` (every head ablated: no ``verification`` column, or every row exhaustive) or ``screened``."""
    if "verification" not in table:
        return EXHAUSTIVE
    marks = table["verification"].dropna().astype(str)  # tables stacked with exhaustive ones have it empty
    return EXHAUSTIVE if (marks == EXHAUSTIVE).all() else "screened"


def ablated_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of heads that were ablated exactly (all of an exhaustive table; verified and sampled of a screened
    one)."""
    if table_basis(table) == EXHAUSTIVE:
        return table
    return table[table["verification"].isin([VERIFIED, SAMPLED])]


def _flags(column) -> np.ndarray:
    return (column.astype(str).str.strip().str.lower() == "true").to_numpy()


def unverified_bound(table: pd.DataFrame, confidence: float, *, study: str = "", testset: str = "") -> dict:
    """What a screened Table 1 (one study, one test set) may have missed, as one row of ``BOUND_COLUMNS``: the
    significant heads found among the verified and the sampled, and the upper bounds at ``confidence`` on how many
    screened-only heads are significant (``bound_significant_unverified``) and how many have |delta| above the
    smallest |delta| of the verified top K (``effect_threshold``; ``bound_larger_unverified``). For an exhaustive
    table every head is verified and both bounds are 0.

    >>> screen = screen_scores(gradient_screens(model, evalset_batches(tokenizer, evalset, 8)), "importance")
    >>> table = screened_sweep(model, tokenizer, evalset, screen, top_k=2, sample=3, resamples=100)
    >>> bound = unverified_bound(table, 0.95)
    >>> bound["screened_only"], bound["bound_significant_unverified"] <= 3
    (3, True)
    """
    n = len(table)
    base = {"study": study, "testset": testset, "heads": n, "confidence": confidence}
    if table_basis(table) == EXHAUSTIVE:
        significant = int(_flags(table["significant"]).sum())
        return {**base, "table1": EXHAUSTIVE, "screen": "", "verified": n, "sampled": 0, "screened_only": 0,
                "significant_verified": significant, "significant_sampled": 0, "bound_significant_unverified": 0,
                "effect_threshold": float("nan"), "larger_sampled": 0, "bound_larger_unverified": 0}
    verification = table["verification"].astype(str).to_numpy()
    verified, sampled = verification == VERIFIED, verification == SAMPLED
    significant = _flags(table["significant"])
    effect = table["delta"].abs().to_numpy(float)
    k, r = int(verified.sum()), int(sampled.sum())
    population = n - k  # the heads outside the top K, which the sample is drawn from
    threshold = float(effect[verified].min()) if k else float("nan")
    larger = int((effect[sampled] > threshold).sum()) if k else 0
    screens = sorted(set(table["screen_method"].dropna().astype(str))) if "screen_method" in table else []
    return {**base, "table1": "screened", "screen": ",".join(screens), "verified": k, "sampled": r,
            "screened_only": n - k - r, "significant_verified": int((significant & verified).sum()),
            "significant_sampled": int((significant & sampled).sum()),
            "bound_significant_unverified": count_bound(int((significant & sampled).sum()), r, population, confidence),
            "effect_threshold": threshold, "larger_sampled": larger,
            "bound_larger_unverified": count_bound(larger, r, population, confidence) if k else n - k - r}


def bound_sentence(bound: dict) -> str:
    """One line for Table 1 and the scorecard: what the table stands on and what it may have missed."""
    if bound["table1"] == EXHAUSTIVE:
        return f"exhaustive Table 1: all {bound['heads']} heads ablated"
    larger = (f", and at most {bound['bound_larger_unverified']} with |delta| above the smallest verified one "
              f"({bound['effect_threshold']:.4g})" if bound["verified"] else "")
    return (f"screened Table 1 ({bound['screen']} screen): {bound['verified']} heads verified, {bound['sampled']} "
            f"sampled, {bound['screened_only']} screened only; "
            f"{bound['significant_verified'] + bound['significant_sampled']} significant found; at {100 * bound['confidence']:g}% confidence at most "
            f"{bound['bound_significant_unverified']} screened-only heads are significant{larger}")


# --- the whole screened sweep -----------------------------------------------------------------------------------


def mark_table(ablation: pd.DataFrame, selection: pd.DataFrame, method: str) -> pd.DataFrame:
    """The screened Table 1: one row per head of ``selection`` (every head), the exact ablation's columns for the
    heads ablated (``ablation``: verified and sampled), empty for the others, and ``verification``,
    ``screen_method``, ``screen``, ``screen_rank``. Raises if a verified or sampled head has no ablation row."""
    import pandas as pd

    wanted = selection[selection["verification"].isin([VERIFIED, SAMPLED])]
    missing = wanted.merge(ablation[KEY], on=KEY, how="left", indicator=True)
    missing = missing[missing["_merge"] == "left_only"]
    if len(missing):
        raise ValueError(f"{len(missing)} verified or sampled heads have no ablation result, e.g. "
                         f"{missing[KEY].iloc[0].tolist()}")
    rows = selection[KEY + ["verification", "screen", "screen_rank"]].assign(screen_method=method)
    table = rows.merge(ablation, on=KEY, how="left")
    for column in ("study", "testset", "metric", "score_full", "alpha", "n_resamples"):
        if column in ablation and len(ablation):  # the same for every head of one study and test set
            table[column] = ablation[column].iloc[0]
    ordered = [c for c in ablation.columns if c in table] + ["verification", "screen_method", "screen", "screen_rank"]
    return pd.DataFrame(table[ordered]).sort_values(KEY).reset_index(drop=True)


def screened_sweep(model, tokenizer, evalset: EvalSet, screen: pd.DataFrame, *, top_k, sample, seed: int = 0,
                   method: str = "screen", settings: EvalSettings | None = None, resamples: int = 1000,
                   alpha: float = 0.01, test_seed: int = 0, study: str = "", testset: str = "") -> pd.DataFrame:
    """Table 1 from a screen (``screen_scores``' table: attn_type, layer, head, screen): the top ``top_k`` heads
    and a seeded sample of ``sample`` of the others ablated exactly with the paired test (``single_head_sweep`` on
    those heads: their rows are the exhaustive sweep's), the rest marked screened only (``mark_table``).
    ``top_k`` and ``sample`` are counts or percentages of the heads ("10%"); ``seed`` draws the sample,
    ``test_seed`` is the paired bootstrap's (the exhaustive sweep's ``seed``).

    >>> screen = screen_scores(gradient_screens(model, evalset_batches(tokenizer, evalset, 8)), "first_order")
    >>> table = screened_sweep(model, tokenizer, evalset, screen, top_k=2, sample=2, resamples=100)
    >>> sorted(table.verification.value_counts().items())
    [('sampled', 2), ('screened', 4), ('verified', 2)]
    """
    from headprune.analyses.sweeps import single_head_sweep

    n = len(screen)
    selection = select_heads(screen, head_count(top_k, n), head_count(sample, n - head_count(top_k, n),
                                                                       "ablation.screen.sample"), seed)
    ablation = single_head_sweep(model, tokenizer, evalset, settings, heads=heads_to_ablate(selection),
                                 resamples=resamples, seed=test_seed, alpha=alpha, study=study,
                                 testset=testset)
    return mark_table(ablation, selection, method)


# --- what a screen got right (benchmarks/screening.py) --------------------------------------------------------


def screen_quality(exhaustive: pd.DataFrame, screened: pd.DataFrame, screen: pd.DataFrame, confidence: float,
                   top_share: float = 0.10, failure: bool = True) -> dict:
    """A screened table against the exhaustive one (same heads): recall of the exhaustive significant heads and of
    its ``top_share`` largest |delta|, the screen's Spearman correlation with the exact |delta|, the bound on
    significant screened-only heads against the true number missed."""
    from scipy.stats import spearmanr

    truth = exhaustive.set_index(KEY)
    table = screened.set_index(KEY).loc[truth.index]
    ablated = table["verification"].isin([VERIFIED, SAMPLED]).to_numpy()
    significant = _flags(truth["significant"])
    effect = truth["delta"].abs().to_numpy(float)
    n_top = max(1, int(round(top_share * len(truth))))
    top = np.zeros(len(truth), dtype=bool)
    top[np.argsort(-effect, kind="stable")[:n_top]] = True
    scores = screen.set_index(KEY).loc[truth.index, "screen"].to_numpy(float)
    bound = unverified_bound(screened, confidence)
    verified = table["verification"].eq(VERIFIED).to_numpy()
    population, sample = int((~verified).sum()), int(table["verification"].eq(SAMPLED).sum())
    larger = effect > bound["effect_threshold"] if bound["verified"] else ~verified
    failures = {"failure_significant": bound_failure_probability(int((significant & ~verified).sum()), population,
                                                                 sample, confidence),
                "failure_larger": bound_failure_probability(int((larger & ~verified).sum()), population, sample,
                                                            confidence)} if failure else {}
    return {"significant": int(significant.sum()), **failures,
            "recall_significant": float((significant & ablated).sum() / max(1, significant.sum())),
            "recall_top": float((top & ablated).sum() / n_top), "top": n_top,
            "spearman": float(spearmanr(scores, effect).statistic),
            "bound_significant_unverified": bound["bound_significant_unverified"],
            "missed_significant": int((significant & ~ablated).sum()),
            "bound_larger_unverified": bound["bound_larger_unverified"],
            "missed_larger": int(((effect > bound["effect_threshold"]) & ~ablated).sum())
            if bound["verified"] else int((~ablated).sum())}
