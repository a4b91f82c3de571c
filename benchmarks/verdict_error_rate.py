#!/usr/bin/env python3
"""The error rate of the speed verdict itself, with no machine in the way.

Both sides of an interleaved comparison (:func:`kernforge.harness.interleave`, 7 passes of 3
runs each, up to 21 passes while inconclusive, as ``integrity validate`` measures: looks after
10, 17 and 21 passes) draw their run times from the same distribution: log-normal around 1 ms
with the per-run spread given. Nothing differs between the sides, so every "faster" or
"slower" verdict is an error of the procedure (the sign-test interval at ``CONFIDENCE``,
Bonferroni over the looks, the 2% noise band), not of a machine. A side that is truly
``--true`` times faster shows the procedure's power. The table: per-run spread, comparisons,
significant self-comparisons (rate and the number expected in 200), the share of comparisons
that find the faster side faster, and the median passes those took.

    python benchmarks/verdict_error_rate.py [--spreads 0.02 0.05 0.10 0.15] [--runs 4000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys

from kernforge.harness.verdict import CONFIDENCE, looks
from kernforge.testing.verdicts import simulated_verdicts


def rates(spread: float, true: float, runs: int, rng: random.Random
          ) -> tuple[float, float, float]:
    """(share called faster, share called slower, median passes) of ``runs`` comparisons of a
    baseline with a candidate ``true`` times faster, both with log-normal run times of sigma
    ``spread``."""
    faster, slower, passes = simulated_verdicts(true, spread, runs, rng)
    return faster / runs, slower / runs, statistics.median(passes)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--spreads", type=float, nargs="+", default=[0.02, 0.05, 0.10, 0.15])
    ap.add_argument("--runs", type=int, default=4000, help="self-comparisons per spread")
    ap.add_argument("--true", type=float, default=1.2, help="the faster candidate's speedup")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.runs < 1 or args.true <= 0 or any(not 0 < s < 1 for s in args.spreads):
        ap.error("--runs >= 1, --true > 0 and every spread between 0 and 1")
    rng = random.Random(args.seed)
    print(f"confidence {CONFIDENCE:.0%} over the looks at {looks(7, 21).at()} passes")
    print(f"{'spread':>7} {'self runs':>9} {'significant':>11} {'rate':>7} {'in 200':>7} "
          f"{f'{args.true:g}x found':>12} {'its passes':>10}")
    for s in args.spreads:
        f0, s0, _ = rates(s, 1.0, args.runs, rng)
        f1, _, p1 = rates(s, args.true, max(100, args.runs // 10), rng)
        wrong = f0 + s0
        print(f"{s:>7.0%} {args.runs:>9} {round(wrong * args.runs):>11} {wrong:>7.2%} "
              f"{200 * wrong:>7.1f} {f1:>12.0%} {p1:>10g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
