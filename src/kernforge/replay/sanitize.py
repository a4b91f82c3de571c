"""The sanitizer gate of validation: the candidate run once under the backend's sanitizers
(cpu: ThreadSanitizer and AddressSanitizer builds; cuda: compute-sanitizer's memcheck,
racecheck, initcheck and synccheck), in subprocesses, on the recorded prologue. A finding
rejects the candidate with the tool's report. It runs for winners and deployments
(:func:`kernforge.replay.validate.validate`), not for every candidate of a search: see
docs/integrity.md for what it costs."""

from __future__ import annotations

from ..backends import SanitizerRun
from ..backends.sanitize import TIMEOUT_ENV, timeout_s
from ..core import Recording, Status
from ..harness.integrity import IntegrityError
from .prepare import Prepared, bind_args

#: tool -> (reason code, status): races are wrong results, memory errors crashes in waiting
FINDINGS: dict[str, tuple[str, Status]] = {
    "tsan": ("sanitizer:race", Status.WRONG_RESULT),
    "racecheck": ("sanitizer:race", Status.WRONG_RESULT),
    "asan": ("sanitizer:memory", Status.RUNTIME_FAILED),
    "memcheck": ("sanitizer:memory", Status.RUNTIME_FAILED),
    "initcheck": ("sanitizer:uninitialized", Status.RUNTIME_FAILED),
    "synccheck": ("sanitizer:sync", Status.RUNTIME_FAILED),
}
_HINTS = {
    "sanitizer:race": "two threads touch the same memory without ordering: use a reduction, "
                      "atomics, or a barrier (__syncthreads) between the write and the read",
    "sanitizer:memory": "an access outside the buffers the kernel was given: check the loop "
                        "bounds and the index arithmetic",
    "sanitizer:uninitialized": "the kernel reads memory nothing wrote (uninitialized shared "
                               "or global memory)",
    "sanitizer:sync": "a barrier not reached by every thread of the block (divergent "
                      "__syncthreads)",
}


def sanitizer_gate(recording: Recording, prepared: Prepared) -> str:
    """Run the compiled candidate under every sanitizer of its backend; raise
    IntegrityError(``sanitizer:*``) on the first finding, else return the note."""
    arrays = {a.name: recording.prologue(a.name) for a in recording.args if a.is_array}
    args = bind_args(recording, prepared.compiled, arrays)
    runs = prepared.backend.sanitize(prepared.compiled, args)
    if not runs:
        return f"skipped: the {prepared.backend.name} backend has no sanitizer"
    # a tool's finding decides before another tool's timeout (which says nothing of the code)
    for r in sorted(runs, key=lambda r: r.timed_out):
        if r.timed_out:
            raise IntegrityError(f"{recording.name}: {r.tool} did not finish (one run of the "
                                 f"candidate on the recorded state):\n{r.report}",
                                 reason="sanitizer:timeout", status=Status.TIMEOUT,
                                 hint=f"a kernel that never ends is rejected so; a slow tool "
                                      f"on a large recorded state needs more time: set "
                                      f"{TIMEOUT_ENV}=SECONDS (now {timeout_s():g})")
        if r.finding:
            reason, status = FINDINGS[r.tool]
            raise IntegrityError(f"{recording.name}: {r.tool} reports an error in the "
                                 f"candidate (one run on the recorded state):\n{r.report}",
                                 reason=reason, status=status, hint=_HINTS[reason])
    return "; ".join(_note(r) for r in runs)


def _note(r: SanitizerRun) -> str:
    if not r.available:
        first = r.report.splitlines()[0] if r.report else "no report"
        return f"{r.tool}: unavailable, nothing checked ({first})"
    return f"{r.tool}: clean ({r.seconds:.1f} s)"
