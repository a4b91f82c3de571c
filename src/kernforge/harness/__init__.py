"""The measurement harness: the timing protocol, correctness checks, statistics, A/B.

Every number kernforge prints comes through here. It imports only ``core`` and ``backends``.
"""

from .compare import ABResult, interleave
from .stats import bootstrap_ci, geomean, median, summarize
from .timing import Protocol, measure
from .verify import check_buffer, verify

__all__ = ["ABResult", "Protocol", "bootstrap_ci", "check_buffer", "geomean", "interleave",
           "measure", "median", "summarize", "verify"]
