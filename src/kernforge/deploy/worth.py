"""Is a tuned kernel worth deploying? Not when it saves less per launch than replacing costs.

Tuning measures what a tuned variant saves per launch: ``baseline_s - tuned_s``, the medians of
the interleaved replay measurement (device time of one launch). Deploying it costs every
replaced launch the host time of the interposition (the CuPy hooks or ``kernforge.Kernel``,
the decision, the tuned launch): :attr:`~.overhead.OverheadTable.per_launch_s`, measured on
the machine by :func:`~.overhead.measure_overhead`. A winner whose saving does not exceed that
overhead is not deployed: the application would be slower with it (when its launches are
issued faster than the device runs them, the host time is hidden behind the device's and the
rule is conservative; the demo's heat3d_cupy on the H200 ran 2.6 ms longer with 60 of its
launches replaced).

>>> table = measure_overhead("cuda")
>>> kept, dropped = worth_deploying(entries, table.per_launch_s)
>>> for d in dropped: print(d.reason)    # figures made up
heat_stencil: saves 0.62 us per launch (61.30 us -> 60.68 us in replay), not more than the
14.10 us a replaced launch costs the host: not deployed
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .spec import DeployEntry


@dataclass(frozen=True)
class Dropped:
    """An entry not deployed, and why."""

    entry: DeployEntry
    reason: str


def saving_s(entry: DeployEntry) -> float:
    """Seconds one launch of the tuned variant saves, as tuning measured it."""
    return entry.evidence.baseline_s - entry.evidence.tuned_s


def not_worth(label: str, baseline_s: float, tuned_s: float, overhead_s: float) -> str | None:
    """Why a tuned kernel (``baseline_s`` -> ``tuned_s`` per launch) is not worth deploying
    when replacing a launch costs ``overhead_s`` of host time (a negative measured overhead
    counts as none), else None."""
    saving = baseline_s - tuned_s
    if saving > max(overhead_s, 0.0):
        return None
    return (f"{label}: saves {_us(saving)} per launch ({_us(baseline_s)} -> {_us(tuned_s)} "
            f"in replay), not more than the {_us(overhead_s)} a replaced launch costs the "
            f"host: not deployed")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def worth_deploying(entries: Sequence[DeployEntry], overhead_s: float
                    ) -> tuple[list[DeployEntry], list[Dropped]]:
    """The entries whose measured saving per launch exceeds ``overhead_s`` (the measured
    host overhead of a replaced launch), and the others with the reason."""
    kept: list[DeployEntry] = []
    dropped: list[Dropped] = []
    for e in entries:
        why = not_worth(e.kernel.label, e.evidence.baseline_s, e.evidence.tuned_s, overhead_s)
        if why is None:
            kept.append(e)
        else:
            dropped.append(Dropped(e, why))
    return kept, dropped
