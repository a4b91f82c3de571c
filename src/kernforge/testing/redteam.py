"""The red-team suite: cheating candidates that every integrity gate setup must reject.

Each *base* is a small real application that calls a real kernel through
:class:`kernforge.Kernel`; its last call is recorded. Each *cheat* is a variant of a base's
kernel (another source, or another launch) that games a naive benchmark: constant output,
cached results, work skipped on repeated calls, work escaping the timed region, partial
writes, stale memory, input-specific shortcuts, cache effects, fast-math, partial grids,
races, timing tampering. :func:`run_cheat` validates it (:func:`kernforge.replay.validate.
validate`) and the suite asserts the Status and reason code it is rejected with.

The catalogs are :mod:`.redteam_c` (CPU backend, C + OpenMP) and :mod:`.redteam_cuda` (CUDA
backend, the equivalents where they apply). ``kernforge integrity redteam`` prints the table.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import LaunchConfig, Recording, Status, Variant
from ..harness.integrity import REASONS

App = Callable[[Any, Any], None]  # (kernel, array module) -> None; the last call is recorded


@dataclass(frozen=True)
class Base:
    """A real kernel and the application that calls it (``calls`` times; the last call is
    the one recorded)."""

    name: str
    entry: str
    code: str
    app: App
    calls: int = 1


@dataclass(frozen=True)
class Cheat:
    """A cheating variant of ``base`` and the verdict it must get.

    ``code``: the candidate source (or a function of the recording, for cheats that embed
    recorded data); None keeps the recorded source (``launch`` then cheats). ``reason`` is the
    code validation must report; ``also``: further acceptable codes where the outcome is
    probabilistic (a race). ``dynamic``: the code expected with static checks off (None: not
    asserted, e.g. a detached thread is unsafe to run in-process)."""

    name: str
    base: str
    what: str
    code: str | Callable[[Recording], str] | None
    status: Status
    reason: str
    also: tuple[str, ...] = ()
    launch: Callable[[Recording], LaunchConfig] | None = None
    dynamic: str | None = None
    dynamic_also: tuple[str, ...] = ()
    note: str = ""

    def __post_init__(self) -> None:
        for code in (self.reason, *self.also, *(() if self.dynamic is None
                                                 else (self.dynamic,)), *self.dynamic_also):
            if code not in REASONS:
                raise ValueError(f"cheat {self.name}: unknown reason {code!r}")

    @property
    def reasons(self) -> tuple[str, ...]:
        return (self.reason, *self.also)

    def variant(self, recording: Recording) -> Variant:
        code = self.code(recording) if callable(self.code) else self.code
        source = recording.source.with_code(code) if code is not None else None
        launch = self.launch(recording) if self.launch is not None else None
        return recording.variant.with_(source=source, launch=launch)


@dataclass
class Outcome:
    """One row of the red-team table."""

    cheat: Cheat
    status: Status
    reason: str
    verdict: str
    message: str
    dynamic: tuple[Status, str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def caught(self) -> bool:
        """Rejected with the expected status and reason; a cheat that only speed can expose
        (status OK: correct, slower in the protocol's cache state) is also caught when the
        speed verdict is inconclusive on a busy machine, for that is never accepted."""
        if self.verdict == "inconclusive":
            return self.cheat.status is Status.OK and self.status is Status.OK
        return (self.verdict == "rejected" and self.status is self.cheat.status
                and self.reason in self.cheat.reasons)


def array_module(backend: str) -> Any:
    if backend == "cuda":
        import cupy

        return cupy
    import numpy

    return numpy


def record_bases(root: Path, bases: Sequence[Base], backend: str) -> dict[str, Recording]:
    """Run each base's application with the recorder on and load the recorded launch."""
    from ..backends.kernel import Kernel
    from ..record import find_recordings, load_recording, record

    xp = array_module(backend)
    out: dict[str, Recording] = {}
    for b in bases:
        kernel = Kernel(b.code, b.entry, backend=backend)
        where = Path(root) / b.name
        with record(where, kernels=b.entry, skip=b.calls - 1, max_instances=1):
            b.app(kernel, xp)
        out[b.name] = load_recording(find_recordings(where)[0])
    return out


def run_cheat(cheat: Cheat, recordings: dict[str, Recording], *, static: bool = True,
              seed: int = 0, **kw: Any) -> Outcome:
    """Validate one cheat (static checks on or off) and return its row."""
    from ..replay.checks import Integrity
    from ..replay.validate import validate

    rec = recordings[cheat.base]
    t0 = time.perf_counter()
    v = validate(rec, cheat.variant(rec), integrity=Integrity(static=static, seed=seed),
                 case=f"{cheat.base}/{cheat.name}", **kw)
    return Outcome(cheat, v.status, v.reason, v.verdict, v.message,
                   extra={"speedup": v.speedup, "sanitize": v.notes.get("sanitize"),
                          "seconds": time.perf_counter() - t0})


def reaches_sanitizer(cheat: Cheat, static: bool = True) -> bool:
    """Whether validating ``cheat`` runs the sanitizer gate (every cheat the static checks do
    not reject: the gate comes right after them), by its expected reason."""
    return not (static and cheat.reason.startswith("static:"))


def run_suite(cheats: Sequence[Cheat], bases: Sequence[Base], backend: str, *,
              dynamic: bool = False, root: Path | None = None, seed: int = 0,
              only: Sequence[str] = (),
              progress: Callable[[int, int, Outcome], None] | None = None) -> list[Outcome]:
    """Record the bases, validate every cheat; ``dynamic``: also with static checks off (for
    the cheats that are safe to run in-process). ``progress(i, n, row)`` after each cheat."""
    chosen = [c for c in cheats if not only or c.name in only]
    with tempfile.TemporaryDirectory(prefix="kernforge-redteam-") as tmp:
        recs = record_bases(Path(root or tmp), bases, backend)
        rows = []
        for i, cheat in enumerate(chosen, 1):
            row = run_cheat(cheat, recs, seed=seed)
            if dynamic and cheat.dynamic is not None:
                d = run_cheat(cheat, recs, static=False, seed=seed)
                row.dynamic = (d.status, d.reason)
                row.extra["seconds"] += d.extra["seconds"]
            rows.append(row)
            if progress is not None:
                progress(i, len(chosen), row)
        return rows


def table(rows: Sequence[Outcome], *, dynamic: bool = False) -> str:
    """The red-team table as Markdown."""
    head = "| case | base | cheat | Status | reason | verdict | caught |"
    rule = "|---|---|---|---|---|---|---|"
    if dynamic:
        head += " static checks off |"
        rule += "---|"
    lines = [head, rule]
    for r in rows:
        line = (f"| {r.cheat.name} | {r.cheat.base} | {r.cheat.what} | {r.status.value} | "
                f"`{r.reason}` | {r.verdict} | {'yes' if r.caught else '**NO**'} |")
        if dynamic:
            line += (f" {r.dynamic[0].value} `{r.dynamic[1]}` |" if r.dynamic
                     else " not run |")
        lines.append(line)
    return "\n".join(lines)
