"""The last steps of the demo: measure what a replaced launch costs the host here, keep the
verified winners worth it (docs/deploy.md, "Is a winner worth deploying?"), export them as a deployment spec, run the application again with it, and measure
the end-to-end speedup (plain vs with the spec, interleaved rounds in this process, outputs
compared)."""

from __future__ import annotations

import contextlib
import io
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..core import KernforgeError, Recording, Variant
from ..deploy import (
    DeployEntry,
    OverheadTable,
    entry_from_recording,
    measure_overhead,
    stop,
    use,
    worth_deploying,
    write_spec,
)
from ..harness import ABResult
from ..harness.verdict import Judgement, judge, min_passes
from .run_app import cupy_hooks_if_available, run_application

#: the fewest interleaved rounds a verdict can be drawn from (judged once, at ``CONFIDENCE``)
ROUNDS = min_passes()

# "checksum c22b..." (examples/heat3d_cpu.py) and "checksum=c22b..." (examples/heat3d_cupy.py)
CHECKSUM = re.compile(r"checksum(?:\s*[=:]\s*|\s+)([0-9a-fA-F]{8,})\b")


@dataclass(frozen=True)
class Winner:
    """A verified variant of a recording and the interleaved comparison that proved it."""

    source: str  # "tune" | "evolve"
    recording: Recording
    variant: Variant
    ab: ABResult


@dataclass
class EndToEnd:
    spec: Path
    winners: list[Winner]
    plain_s: list[float] = field(default_factory=list)
    deployed_s: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    plain_output: str = ""
    deployed_output: str = ""
    substituted: int = 0

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios) if self.ratios else 1.0

    @property
    def judgement(self) -> Judgement:
        """The speed verdict on the per-round ratios (:func:`kernforge.harness.verdict.judge`:
        faster, not faster or inconclusive, with the reason)."""
        return judge(self.ratios)

    @property
    def ci(self) -> tuple[float, float]:
        """The distribution-free interval of the median per-round ratio at ``CONFIDENCE`` (the
        whole range when the rounds are too few for it: then the verdict is inconclusive)."""
        return self.judgement.ci or (1.0, 1.0)

    @property
    def plain_median_s(self) -> float:
        return statistics.median(self.plain_s) if self.plain_s else 0.0

    @property
    def deployed_median_s(self) -> float:
        return statistics.median(self.deployed_s) if self.deployed_s else 0.0

    @property
    def direction(self) -> str:
        """How the rounds agree: all faster with the spec, all slower, or mixed."""
        if self.ratios and min(self.ratios) > 1.0:
            return "faster with the spec in every round"
        if self.ratios and max(self.ratios) < 1.0:
            return "slower with the spec in every round"
        return "faster in some rounds, slower in others"

    @property
    def identical(self) -> bool:
        a, b = CHECKSUM.findall(self.plain_output), CHECKSUM.findall(self.deployed_output)
        return bool(a) and a == b


@dataclass(frozen=True)
class NotDeployed:
    """A verified winner left out of the spec, and why."""

    winner: Winner
    reason: str


def entry_of(w: Winner) -> DeployEntry:
    """The deployment entry of a winner (its A/B medians as the evidence)."""
    return entry_from_recording(w.recording, w.variant, baseline_s=w.ab.median_a,
                                tuned_s=w.ab.median_b, speedup=w.ab.speedup,
                                speedup_ci=(w.ab.ci_low, w.ab.ci_high), verified=True)


def deploy_overhead(backend: str, *, launches: int = 500, batches: int = 7
                    ) -> tuple[OverheadTable | None, str]:
    """What a replaced launch costs the host on ``backend`` (:func:`measure_overhead`; about
    a second), or None and why it could not be measured."""
    try:
        return measure_overhead(backend, launches=launches, batches=batches), ""
    except KernforgeError as exc:
        return None, exc.message.strip().splitlines()[0]


def worth(winners: Sequence[Winner], overhead_s: float, issue_s: float | None = None
          ) -> tuple[list[Winner], list[NotDeployed]]:
    """The winners worth deploying (:func:`worth_deploying`: saving per launch above
    ``overhead_s``, or a device-bound launch given ``issue_s``), and the others with the
    reason."""
    entries = [entry_of(w) for w in winners]
    kept, dropped = worth_deploying(entries, overhead_s, issue_s)
    index = {id(e): i for i, e in enumerate(entries)}
    return ([winners[index[id(e)]] for e in kept],
            [NotDeployed(winners[index[id(d.entry)]], d.reason) for d in dropped])


def export_spec(winners: Sequence[Winner], path: Path) -> Path:
    """One entry per winner (each a different kernel) in one deployment spec."""
    return write_spec(path, [entry_of(w) for w in winners])


#: one timed run of the application: (seconds, its standard output, launches replaced)
Run = tuple[float, str, int]
#: how one arm of a comparison runs the application once (raises KernforgeError on failure)
Arm = Callable[[], Run]


def run_timed(command: Sequence[str], spec: Path | None) -> tuple[float, str, int, int]:
    """The application run once in this process (``spec``: with that Python deployment spec
    active): seconds, standard output, launches replaced and exit status."""
    buf = io.StringIO()
    substituted = 0
    with cupy_hooks_if_available(), contextlib.redirect_stdout(buf):
        dep = use(spec) if spec is not None else None
        t0 = time.perf_counter()
        try:
            status = run_application(command)
        finally:
            elapsed = time.perf_counter() - t0
            if dep is not None:
                report = stop()
                substituted = report.replaced if report is not None else 0
    return elapsed, buf.getvalue(), substituted, status


def failed(status: int, what: str, detail: str = "") -> KernforgeError:
    """The error of a run of the application that exited with ``status`` (``detail``: the
    end of what it wrote on stderr, when that was kept)."""
    return KernforgeError(f"the application exited with {status} ({what})"
                          + (f": {detail}" if detail else ""),
                          hint="run the application alone to see why")


def _run_once(command: Sequence[str], spec: Path | None) -> Run:
    elapsed, out, substituted, status = run_timed(command, spec)
    if status != 0:
        raise failed(status, "with the spec" if spec else "without the spec")
    return elapsed, out, substituted


def interleave(arms: Sequence[Arm], rounds: int, *, label: str = "end to end",
               progress: Callable[[str], None] = lambda s: None) -> list[list[Run]]:
    """One untimed warm-up of each arm, then ``rounds`` interleaved rounds, each starting
    with the next arm (two arms: the order alternates). Returns per arm its runs, the
    warm-up first."""
    runs: list[list[Run]] = [[arm()] for arm in arms]
    for i in range(rounds):
        progress(f"{label}: round {i + 1}/{rounds}")
        for k in range(len(arms)):
            j = (i + k) % len(arms)
            runs[j].append(arms[j]())
    return runs


def paired(spec: Path, winners: list[Winner], plain: list[Run], deployed: list[Run]
           ) -> EndToEnd:
    """The comparison of two arms' runs (:func:`interleave`'s, the warm-up first): the
    per-round ratios plain / deployed, the warm-up's plain output and the last deployed
    run's output and replaced launches."""
    e = EndToEnd(spec, winners)
    e.plain_output, e.deployed_output = plain[0][1], deployed[-1][1]
    e.substituted = deployed[-1][2]
    for (p, _, _), (d, _, _) in zip(plain[1:], deployed[1:], strict=True):
        e.plain_s.append(p)
        e.deployed_s.append(d)
        e.ratios.append(p / d)
    return e


def end_to_end(command: Sequence[str], winners: list[Winner], spec: Path, *,
               rounds: int = ROUNDS, progress: Callable[[str], None] = lambda s: None
               ) -> EndToEnd:
    """One untimed warm-up of each, then ``rounds`` interleaved rounds (order alternating),
    in this process; the speedup is the median of the per-round ratios plain / with spec."""
    plain, deployed = interleave([lambda: _run_once(command, None),
                                  lambda: _run_once(command, spec)], rounds,
                                 progress=progress)
    return paired(spec, winners, plain, deployed)


@dataclass(frozen=True)
class Confirmed:
    """One winner deployed alone in the application (:func:`confirm_each`)."""

    winner: Winner
    e2e: EndToEnd
    kept: bool


def confirm_each(command: Sequence[str], winners: Sequence[Winner], run_dir: Path, *,
                 rounds: int = ROUNDS, progress: Callable[[str], None] = lambda s: None
                 ) -> tuple[list[Confirmed], list[NotDeployed]]:
    """Each winner deployed alone in the application (``rounds`` interleaved rounds, its own
    spec under ``run_dir/confirm``): kept when the speed verdict on the rounds is "faster"
    (:attr:`EndToEnd.judgement`), launches were replaced and the outputs are identical. Left
    out otherwise, with the verdict's reason: "not faster" or "inconclusive" (the rounds
    disagree or are too few: measure again on a quieter machine or with more rounds), never
    called slower unless the interval says so.

    A kernel faster in replay is not always faster in the application: replay times a launch
    with a cold L2 and no neighbours, and a replaced launch costs the host time. These runs
    select; the end-to-end measurement that the demo reports is made afterwards, on fresh
    rounds of the kept winners together."""
    checked: list[Confirmed] = []
    dropped: list[NotDeployed] = []
    for w in winners:
        name = w.recording.source.entry
        spec = export_spec([w], run_dir / "confirm" / f"{_safe(name)}.json")
        progress(f"confirming {name} alone in the application ({rounds} rounds)")
        try:
            e = end_to_end(command, [w], spec, rounds=rounds)
        except KernforgeError as exc:  # the application failed with it: left out
            why = exc.message.strip().splitlines()[0]
            dropped.append(NotDeployed(w, f"{name}: the application failed with it alone "
                                          f"({why}): not deployed"))
            continue
        speed = e.judgement
        kept = speed.faster and e.substituted > 0 and e.identical
        checked.append(Confirmed(w, e, kept))
        if not kept:
            why = ("outputs differ" if not e.identical else "no launch replaced"
                   if e.substituted < 1 else f"in the application alone, {speed.reason} "
                   f"(median of {len(e.ratios)} interleaved rounds)")
            dropped.append(NotDeployed(w, f"{name}: {why}: not deployed"))
    return checked, dropped


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:80]
