"""Integrity gates: the machine-readable reason codes and the error a failed gate raises.

Every failed evaluation carries a :class:`~kernforge.core.Status` (what kind of failure) and a
*reason code* (which gate, and why), stored as ``Measurement.extra["reason"]``. The codes are
stable strings, ``<gate>:<what>``; docs/integrity.md describes each one.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core import BufferCheck, KernforgeError, Status

#: reason code -> one-line meaning (the table in docs/integrity.md is generated from this)
REASONS: dict[str, str] = {
    "static:thread": "the source creates threads or processes (work could escape the timer)",
    "static:stream": "the source creates streams, launches kernels or copies asynchronously",
    "static:timer": "the source reads a clock or timer, or sleeps",
    "static:io": "the source does file, network, environment or process I/O",
    "static:state": "the source keeps mutable static/global state across calls",
    "static:fastmath": "fast-math intrinsics or pragmas while outputs are verified bitwise",
    "static:host": "device code calls a host function",
    "verify:recorded": "the outputs differ from the recorded epilogue (the same way every run)",
    "verify:nondeterministic": "repeated runs from the same prologue give different outputs",
    "verify:after-timing": "the outputs of the last timed run fail verification",
    "poison:unwritten": "elements the recorded kernel overwrites were left unwritten (they "
                        "kept the poison the harness filled them with)",
    "poison:stale-read": "with poisoned outputs, results differ: they depend on prior contents "
                         "of output memory that the recorded kernel overwrites without reading",
    "fresh:mismatch": "on fresh random inputs the outputs differ from the recorded kernel's",
    "roofline:exceeded": "the measured time is below bytes-that-must-move / copy bandwidth",
    "regression:prior-best": "conclusively slower than the prior best of this case: the "
                             "interval's upper end below the prior best less the band",
    "measure:inconclusive": "the speed verdict is inconclusive (busy device, runs spread "
                            "beyond the noise limit, or an interval that straddles the band "
                            "after the passes allowed): neither accepted nor rejected",
    "remeasure:lower": "the canonical re-measurement is below the claimed speedup (downgraded)",
    "idle:busy": "the device was busy before or during the canonical re-measurement "
                 "(inconclusive: neither accepted nor rejected)",
    "sanitizer:race": "the sanitizer run (ThreadSanitizer, compute-sanitizer racecheck) "
                      "found a data race",
    "sanitizer:memory": "the sanitizer run (AddressSanitizer, compute-sanitizer memcheck) "
                        "found an out-of-bounds or invalid memory access",
    "sanitizer:uninitialized": "the sanitizer run (compute-sanitizer initcheck) found a read "
                               "of uninitialized memory",
    "sanitizer:sync": "the sanitizer run (compute-sanitizer synccheck) found invalid "
                      "barrier use",
    "sanitizer:timeout": "a sanitizer run did not finish within its time limit "
                         "($KERNFORGE_SANITIZER_TIMEOUT_S, default 300 s)",
    "config:invalid": "invalid option, define, launch geometry or signature",
    "compile:failed": "the compiler rejected the variant",
    "launch:failed": "the launch failed",
    "runtime:failed": "the kernel crashed",
    "timeout": "the kernel did not finish in time",
}

_BY_STATUS = {
    Status.INVALID_CONFIG: "config:invalid", Status.COMPILE_FAILED: "compile:failed",
    Status.LAUNCH_FAILED: "launch:failed", Status.RUNTIME_FAILED: "runtime:failed",
    Status.TIMEOUT: "timeout", Status.WRONG_RESULT: "verify:recorded",
}


def reason_for_status(status: Status) -> str:
    """The reason code of a failure that no integrity gate named ("" for OK)."""
    return _BY_STATUS.get(status, "")


class IntegrityError(KernforgeError):
    """A candidate failed an integrity gate; ``reason`` is the machine-readable code."""

    exit_code = 5

    def __init__(self, message: str, *, reason: str, status: Status = Status.WRONG_RESULT,
                 checks: Sequence[BufferCheck] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        if reason not in REASONS:
            raise ValueError(f"unknown integrity reason {reason!r}")
        self.reason = reason
        self.status = status
        self.checks = tuple(checks)
