"""The measurement harness: the timing protocol, correctness checks, statistics, A/B.

Every number kernforge prints comes through here. It imports only ``core`` and ``backends``.
"""

from .compare import ABResult, interleave, round_robin
from .stats import bootstrap_ci, by_precision, geomean, median, precision_of, summarize
from .timing import Protocol, measure, measure_runs, time_once
from .verify import check_buffer, verify

__all__ = ["ABResult", "Protocol", "bootstrap_ci", "by_precision", "check_buffer", "geomean",
           "interleave", "measure", "measure_runs", "median", "precision_of", "round_robin",
           "summarize", "time_once", "verify"]
