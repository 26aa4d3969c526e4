"""Wu et al. (2025)'s claims about retrieval heads, W1-W4, tested on every retrieval study (head_roles.csv and
retrieval_heads.csv of experiments.retrieval_heads). A scorecard handed neither table has no W rows."""
from __future__ import annotations

import pandas as pd

from headprune.evaluation.metrics import better_sign
from headprune.report.claims.base import NOT_RUN, Claim, by_study, claim, flags, in_points, share, show, verdict

FEW_RETRIEVAL_HEADS = 5.0  # W1: "fewer than 5% of the heads" are retrieval heads
RETRIEVAL_HEAD = 0.1  # W1: a retrieval head scores above this (Wu et al.; headprune.scoring.lm_roles)
FAR_MORE = 20.0  # W2: points of retrieval accuracy the top-K heads cost beyond K random heads
LITTLE = 5.0  # W3: % of the full model's perplexity masking the top-K retrieval heads may add
TASK_MORE = 5.0  # W4: points of a task's score the top-K heads cost beyond K random heads


class RetrievalClaim(Claim):
    """A claim of Wu et al.'s: judged only where the scorecard was handed their experiment's tables."""

    def judge(self, evidence):
        if not (evidence.given("roles") or evidence.given("retrieval_heads")):
            return []
        return self.judge_studies(evidence)

    def judge_studies(self, evidence) -> list[dict]:
        raise NotImplementedError


class TopAgainstRandom(RetrievalClaim):
    """A claim on retrieval_heads.csv: the top-K heads masked against K random heads, at the largest K run."""

    def scored(self, retrieval_heads: pd.DataFrame) -> pd.DataFrame:
        """The rows of retrieval_heads.csv the claim reads (empty: not run)."""
        raise NotImplementedError

    def judge_at_k(self, study: str, k: int, top: pd.Series, random_sets: pd.DataFrame) -> dict:
        """A study's row from its top-K row and its random K-head sets at the largest K."""
        raise NotImplementedError

    def judge_studies(self, evidence):
        scored = self.scored(evidence["retrieval_heads"])
        if scored.empty:
            return [self.not_run()]
        rows = []
        for study, table in by_study(scored):
            k = int(table["k"].max())
            at_k = table[table["k"] == k]
            top, random_sets = at_k[at_k.selection == "top"].iloc[0], at_k[at_k.selection == "random"]
            rows.append(self.judge_at_k(study, k, top, random_sets))
        return rows


class RetrievalScored(TopAgainstRandom):
    """W2 and W3 read the rows scored by retrieval."""

    def scored(self, retrieval_heads):
        if retrieval_heads.empty or "retrieval" not in retrieval_heads:
            return pd.DataFrame()
        return retrieval_heads[retrieval_heads["retrieval"].notna()]


@claim
class FewRetrievalHeads(RetrievalClaim):
    code = "W1"
    statement = "Wu et al.: fewer than 5% of the heads are retrieval heads"
    evidence = "head_roles.csv"
    source = "Llama-2-7B-80K, Yi, Qwen, Mistral (Wu et al., Figure 2): under 5% of heads score above 0.1"
    rule = (f"reproduced if fewer than {FEW_RETRIEVAL_HEADS:g}% of the query heads score above {RETRIEVAL_HEAD:g} "
            "(Wu et al.'s retrieval score, the authors' code's definition)")

    def judge_studies(self, evidence):
        roles = evidence["roles"]
        if roles.empty:
            return [self.not_run()]
        rows = []
        for study, table in by_study(roles):
            scores = table["retrieval"].astype(float)
            if scores.isna().all():
                rows.append(self.row(study, "no needle item answered correctly: no retrieval score", NOT_RUN))
                continue
            count = int((scores > RETRIEVAL_HEAD).sum())
            best = table.loc[scores.idxmax()]
            this_run = (f"{share(count, len(table))} heads score above {RETRIEVAL_HEAD:g} (highest: layer "
                        f"{int(best.layer)} head {int(best['head'])}, {best.retrieval:.2f})")
            rows.append(self.row(study, this_run, verdict(100.0 * count / len(table) < FEW_RETRIEVAL_HEADS)))
        return rows


@claim
class RetrievalMasked(RetrievalScored):
    code = "W2"
    statement = "Wu et al.: masking the top-K retrieval heads costs far more retrieval than masking K random heads"
    evidence = "retrieval_heads.csv"
    source = ("Llama-2-7B-80K (Wu et al., Figure 6): top-50 retrieval heads masked, needle-in-a-haystack below 50%; "
              "50 random heads, above 80%")
    rule = (f"at the largest K run: reproduced if masking the top-K heads leaves a retrieval accuracy at least "
            f"{FAR_MORE:g} points below the mean over the K-random-head sets, and its drop is significant")

    def judge_at_k(self, study, k, top, random_sets):
        random_mean = float(random_sets["retrieval"].mean())
        gap = in_points(random_mean - float(top.retrieval), "retrieval")
        this_run = (f"K={k}: top-K heads masked {show(top.retrieval, 'retrieval')}, K random heads "
                    f"{show(random_mean, 'retrieval')} (mean of {len(random_sets)} sets), all heads "
                    f"{show(float(top.retrieval_full), 'retrieval')}")
        significant = flags(pd.Series([top.significant_retrieval])).iloc[0]
        return self.row(study, this_run, verdict(gap >= FAR_MORE and significant))


@claim
class PerplexityUnmoved(RetrievalScored):
    code = "W3"
    statement = "Masking the retrieval heads moves perplexity little (perplexity does not see them)"
    evidence = "retrieval_heads.csv"
    source = "not measured by Wu et al.: this project's question (perplexity alone would not show it)"
    rule = (f"at the largest K run: reproduced if masking the top-K heads raises perplexity by less than {LITTLE:g}% "
            "of the full model's")

    def judge_at_k(self, study, k, top, random_sets):
        full = float(top.perplexity_full)
        rise = 100.0 * (float(top.perplexity) - full) / full
        random_mean = float(random_sets["perplexity"].mean())
        random_rise = 100.0 * (random_mean - full) / full
        this_run = (f"K={k}: perplexity {float(top.perplexity):.2f} with the top-K heads masked ({rise:+.1f}%), "
                    f"{random_mean:.2f} with K random heads ({random_rise:+.1f}%), {full:.2f} with all")
        return self.row(study, this_run, verdict(rise < LITTLE))


@claim
class TasksSuffer(TopAgainstRandom):
    code = "W4"
    statement = ("Wu et al.: a task that reads its answer from the context suffers from masking the retrieval heads "
                 "far more than from masking as many random heads")
    evidence = "retrieval_heads.csv of a task"
    source = ("Mistral-7B-Instruct-v0.2 (Wu et al., Table 3): 100 retrieval heads masked, extractive QA F1 56.7 -> "
              "32.3, GSM8K chain-of-thought 45.1 -> 2.0")
    rule = (f"at the largest K run: reproduced if masking the top-K retrieval heads costs the task's score at least "
            f"{TASK_MORE:g} points more than the mean of the random K-head sets, significantly (p < alpha against the "
            "full model)")

    def scored(self, retrieval_heads):
        """Wu et al.'s experiment scored on a task (columns task, task_full, task_metric)."""
        if retrieval_heads.empty or "task" not in retrieval_heads:
            return pd.DataFrame()
        return retrieval_heads[retrieval_heads["task"].notna()]

    def judge_at_k(self, study, k, top, random_sets):
        metric = str(top.task_metric)
        random_mean = float(random_sets["task"].mean())
        # the cost in points, worse counted positive whichever way the metric goes
        gap = better_sign(metric) * in_points(random_mean - float(top.task), metric)
        this_run = (f"K={k}: {metric} {show(top.task, metric)} with the top-K retrieval heads masked, "
                    f"{show(random_mean, metric)} with K random heads (mean of {len(random_sets)} sets), "
                    f"{show(top.task_full, metric)} with all")
        significant = flags(pd.Series([top.significant_task])).iloc[0]
        return self.row(study, this_run, verdict(gap >= TASK_MORE and significant))
