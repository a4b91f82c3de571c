"""Is a tuned kernel worth deploying? Not when replacing its launches costs more than it saves.

Tuning measures what a tuned variant saves per launch: ``baseline_s - baseline_s / speedup``,
the recorded median of the interleaved replay measurement (device time of one launch) and its
median per-pass ratio, so the saving never contradicts the speedup printed beside it. Deploying it costs every
replaced launch the host time of the interposition (the CuPy hooks or ``kernforge.Kernel``,
the decision, the tuned launch): :attr:`~.overhead.OverheadTable.per_launch_s`, measured on
the machine by :func:`~.overhead.measure_overhead`. A winner is deployed when

- its saving exceeds that overhead (the application gains even when the host is the
  bottleneck), or
- given ``issue_s`` (the host time of a plain launch, measured alongside), the tuned kernel
  itself runs longer on the device than the host takes to issue a replaced launch
  (``tuned_s > issue_s + overhead_s``): the host stays ahead of the device, and the overhead
  overlaps the kernel instead of adding to the run (how the demo's heat3d_cupy deploys its
  z-marched stencil on the H200: ~18 us saved, ~12-23 us of overhead, a 54 us kernel).

Anything else is not deployed (with a tiny saving and a short kernel, the demo's heat3d_cupy on
the H200 once ran 2.6 ms longer with 60 of its launches replaced). The rule is a filter, not a
proof: it also admitted a ``sq_diff_partial`` 1.009x faster in replay that made the same
application 0.866x on the H200, so the demo then runs the application with each admitted winner
alone and deploys only those it is faster with (``kernforge.pipeline.demo_deploy.confirm_each``).

>>> table = measure_overhead("cuda")
>>> kept, dropped = worth_deploying(entries, table.per_launch_s, table.issue_s)
>>> for d in dropped: print(d.reason)    # figures made up
heat_stencil: saves 0.62 us per launch (61.30 us -> 60.68 us in replay), not more than the
14.10 us a replaced launch costs the host: not deployed
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .gate import refusal
from .spec import DeployEntry


@dataclass(frozen=True)
class Dropped:
    """An entry not deployed, and why."""

    entry: DeployEntry
    reason: str


def tuned_time_s(entry: DeployEntry) -> float:
    """One tuned launch's seconds at the interleaved ratio: the recorded median over the
    speedup (so a saving has the sign of the speedup kernforge reports; the two medians of a
    noisy measurement can disagree with their median ratio)."""
    ev = entry.evidence
    return ev.baseline_s / ev.speedup if ev.speedup > 0 else ev.tuned_s


def saving_s(entry: DeployEntry) -> float:
    """Seconds one launch of the tuned variant saves, as tuning measured it."""
    return entry.evidence.baseline_s - tuned_time_s(entry)


def not_worth(label: str, baseline_s: float, tuned_s: float, overhead_s: float,
              issue_s: float | None = None) -> str | None:
    """Why a tuned kernel (``baseline_s`` -> ``tuned_s`` per launch) is not worth deploying
    when replacing a launch costs ``overhead_s`` of host time (a negative measured overhead
    counts as none) and a plain launch ``issue_s`` (None: unknown), else None (see the
    module's rule)."""
    saving = baseline_s - tuned_s
    overhead = max(overhead_s, 0.0)
    if saving > overhead:
        return None
    if saving > 0 and issue_s is not None and tuned_s > issue_s + overhead:
        return None  # device-bound: the host overhead overlaps the kernel
    why = (f"{label}: saves {_us(saving)} per launch ({_us(baseline_s)} -> {_us(tuned_s)} "
           f"in replay), not more than the {_us(overhead_s)} a replaced launch costs the host")
    if issue_s is not None and saving > 0:
        why += (f", and the kernel is shorter than the {_us(issue_s + overhead)} the host "
                f"needs to issue a replaced launch")
    return why + ": not deployed"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def worth_deploying(entries: Sequence[DeployEntry], overhead_s: float,
                    issue_s: float | None = None) -> tuple[list[DeployEntry], list[Dropped]]:
    """The entries worth deploying by the module's rule (``overhead_s``: the measured host
    overhead of a replaced launch; ``issue_s``: of a plain launch), and the others with the
    reason. An entry whose evidence's speed verdict is not "faster" (:func:`.gate.refusal`:
    "not faster" or "inconclusive") is never worth it, whatever it saves: its saving is
    noise, and the reason is the verdict's."""
    kept: list[DeployEntry] = []
    dropped: list[Dropped] = []
    for e in entries:
        ev = e.evidence
        speed = refusal(verified=ev.verified, idle=ev.idle, speedup=ev.speedup,
                        ci=ev.speedup_ci, require_ci=False)
        why = (f"{e.kernel.label}: {speed}: not deployed" if speed is not None else
               not_worth(e.kernel.label, ev.baseline_s, tuned_time_s(e), overhead_s, issue_s))
        if why is None:
            kept.append(e)
        else:
            dropped.append(Dropped(e, why))
    return kept, dropped
