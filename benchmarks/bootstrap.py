"""Time the paired bootstrap of BLEU: compare-mt's own loop against headprune.evaluation.stats.paired_bootstrap_bleu.

A synthetic test set (random words, two noisy systems; nothing is downloaded) the size of the
paper's newstest2013 (3000 sentences). The old path is what paired_bootstrap_bleu used to run:
compare-mt's sign_utils.eval_with_paired_bootstrap with BleuScorer's cached statistics. Both get
the same already-tokenized input, so the timing is the bootstrap alone; the two results must agree.

    python benchmarks/bootstrap.py                     # 3000 sentences, 1000 resamples
    python benchmarks/bootstrap.py --sentences 200 --resamples 100   # seconds, for a smoke test
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from headprune.evaluation import stats


def synthetic_corpus(n_sent: int, seed: int = 0):
    """Whitespace-tokenized references and two systems substituting 20% and 25% of the words."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    refs, hyps_a, hyps_b = [], [], []
    for _ in range(n_sent):
        ref = list(rng.choice(vocab, size=int(rng.integers(5, 45))))
        refs.append(" ".join(ref))
        hyps_a.append(" ".join(t if rng.random() >= 0.20 else "oov" for t in ref))
        hyps_b.append(" ".join(t if rng.random() >= 0.25 else "oov" for t in ref[: len(ref) - int(rng.integers(0, 3))]))
    return hyps_a, hyps_b, refs


def compare_mt_bootstrap(hyps_a, hyps_b, refs, n_resamples, seed, sample_ratio):
    from compare_mt import scorers as cm_scorers
    from compare_mt import sign_utils

    ref_tok = [r.split() for r in refs]
    outs = [[h.split() for h in hyps_a], [h.split() for h in hyps_b]]
    scorer = cm_scorers.BleuScorer()
    np.random.seed(seed)
    ratios, _ = sign_utils.eval_with_paired_bootstrap(ref_tok, outs, [None] * len(refs), scorer,
                                                      num_samples=n_resamples, sample_ratio=sample_ratio)
    return round(ratios[0][0] * n_resamples), round(ratios[0][1] * n_resamples)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--sample-ratio", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    hyps_a, hyps_b, refs = synthetic_corpus(args.sentences)
    compare_mt_bootstrap(hyps_a[:2], hyps_b[:2], refs[:2], 1, 0, 1.0)  # imports compare-mt (nltk) outside the timing

    start = time.perf_counter()
    old = compare_mt_bootstrap(hyps_a, hyps_b, refs, args.resamples, args.seed, args.sample_ratio)
    old_s = time.perf_counter() - start

    stats._bleu_stats.cache_clear()  # a first call: nothing cached yet
    start = time.perf_counter()
    new = stats.paired_bootstrap_bleu(hyps_a, hyps_b, refs, n_resamples=args.resamples, seed=args.seed,
                                      tokenized=True, sample_ratio=args.sample_ratio)
    new_s = time.perf_counter() - start
    # a later call with another system B, as in the pipeline (one per ablated head): A's statistics are cached
    start = time.perf_counter()
    stats.paired_bootstrap_bleu(hyps_a, hyps_b[1:] + hyps_b[:1], refs, n_resamples=args.resamples, seed=args.seed,
                                tokenized=True, sample_ratio=args.sample_ratio)
    repeat_s = time.perf_counter() - start

    if old != (new.wins_a, new.wins_b):
        raise SystemExit(f"results differ: compare-mt wins {old}, paired_bootstrap_bleu {(new.wins_a, new.wins_b)}")
    print(f"{args.sentences} sentences, {args.resamples} resamples, sample ratio {args.sample_ratio}: "
          f"BLEU A {new.score_a:.2f}, B {new.score_b:.2f}, wins A {new.wins_a}, B {new.wins_b}, p {new.p_value:.3f}")
    print(f"compare-mt eval_with_paired_bootstrap: {old_s:.3f} s")
    print(f"paired_bootstrap_bleu, first call:     {new_s:.3f} s  ({old_s / new_s:.0f}x faster)")
    print(f"paired_bootstrap_bleu, new system B:   {repeat_s:.3f} s  ({old_s / repeat_s:.0f}x faster)")


if __name__ == "__main__":
    main()
