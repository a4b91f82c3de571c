"""The measurement harness: the timing protocol, correctness checks, statistics, A/B.

Every number kernforge prints comes through here. It imports only ``core`` and ``backends``.
"""

from .compare import ABResult, interleave
from .stats import bootstrap_ci, by_precision, geomean, median, precision_of, summarize
from .timing import Protocol, measure
from .verify import check_buffer, verify

__all__ = ["ABResult", "Protocol", "bootstrap_ci", "by_precision", "check_buffer", "geomean",
           "interleave", "measure", "median", "precision_of", "summarize", "verify"]
