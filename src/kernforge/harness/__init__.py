"""The measurement harness: the timing protocol, correctness checks, statistics, A/B.

Every number kernforge prints comes through here. It imports only ``core`` and ``backends``.
"""

from .compare import ABResult, Arms, interleave, interleave_arms, round_robin
from .stats import (
    bootstrap_ci,
    by_precision,
    geomean,
    median,
    median_ci,
    precision_of,
    summarize,
)
from .timing import Protocol, measure, measure_runs, time_once
from .verdict import NOISE_BAND, Judgement, Verdict, judge, judge_evidence
from .verify import check_buffer, verify

__all__ = ["NOISE_BAND", "ABResult", "Arms", "Judgement", "Protocol", "Verdict",
           "bootstrap_ci", "by_precision", "check_buffer", "geomean", "interleave",
           "interleave_arms", "judge", "judge_evidence", "measure", "measure_runs", "median",
           "median_ci", "precision_of", "round_robin", "summarize", "time_once", "verify"]
