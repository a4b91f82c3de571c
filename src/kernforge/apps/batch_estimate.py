"""What a program's next milestone is known to need, from its own recorded progress, so a
batch does not start a program on a share it would clearly be stopped in (the milestone in
flight is redone when resumed: the time would be lost).

Each figure is a lower bound, never a guess from other programs:

- M2 (each dataset run once under the recorder): one baseline pass of M1, ``(M1's time -
  the build) / (1 + rounds)`` (M1 runs every dataset once, then ``rounds`` rounds);
- M3: for M3a, which keeps the units it finished (:mod:`.strategies.unit_rows`), the
  longest stopped attempt of the unit left unfinished plus, for each other unit left, what
  the fastest finished one took (a unit's attempt includes the run that records its time
  loop as a sequence, :mod:`.loop_sequence`: that run is in these figures); for another M3
  strategy (redone whole), its longest stopped attempt;
- M4: ``2 x e2e_rounds`` passes (each round runs every dataset with and without);
- a milestone stopped before: the longest of its stopped attempts (the batch records it when
  it stops a program at its share).

M1 and a first M3 have no such figure: they are started on any share.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .budget import format_duration
from .manifest import Manifest
from .store import DB_NAME, AppStore, AppStoreError, Milestone
from .strategies import candidate_kernels, strategies, unit_rows


@dataclass(frozen=True)
class Need:
    milestone: str
    seconds: float
    why: str

    def describe(self) -> str:
        return f"its next milestone {self.milestone} needs at least " \
               f"{format_duration(self.seconds)} ({self.why})"


def pass_s(m1: Milestone, rounds: int) -> float | None:
    """One pass over every dataset, from M1's wall time less its build."""
    if not m1.settled or m1.finished is None:
        return None
    build = float(m1.figures.get("build_s") or 0.0)
    s = (m1.finished - m1.started - build) / (1 + rounds)
    return s if s > 0 else None


def next_need(run: Path, manifest: Manifest, stopped_s: dict[str, float]) -> Need | None:
    """The lower bound of what the run in ``run`` needs to finish its next milestone, or
    None when nothing is known (a run not started, M1, a first M3). ``stopped_s``: per
    milestone, the longest attempt the batch stopped."""
    if not (run / DB_NAME).is_file():
        return None
    try:
        store = AppStore.open(run)
    except AppStoreError:
        return None
    try:
        ms = {m.name: m for m in store.milestones()}
        app = store.app()
    finally:
        store.close()
    if app is None:
        return None
    nxt = next((n for n in ("M1", "M2", "M3", "M4") if n not in ms or not ms[n].settled), None)
    if nxt is None:
        return None
    found: list[Need] = []
    if nxt == "M3":
        found += _m3(run, manifest, ms, stopped_s)
    elif stopped_s.get(nxt):
        found.append(Need(nxt, stopped_s[nxt], "the longest attempt stopped before"))
    one = pass_s(ms["M1"], manifest.measure.rounds) if "M1" in ms else None
    if one is not None and nxt == "M2":
        found.append(Need("M2", one, f"each dataset recorded once; one pass of M1 took "
                                     f"{format_duration(one)}"))
    if one is not None and nxt == "M4":
        n = 2 * manifest.measure.e2e_rounds
        found.append(Need("M4", n * one, f"{n} passes with and without; one pass of M1 took "
                                         f"{format_duration(one)}"))
    return max(found, key=lambda x: x.seconds, default=None)


def _m3(run: Path, manifest: Manifest, ms: dict[str, Milestone],
        stopped_s: dict[str, float]) -> list[Need]:
    out: list[Need] = []
    for name in manifest.integrate.strategies:
        cls = strategies.get(name)
        m = ms.get(cls.milestone)
        if m is not None and m.status in ("DONE", "SKIPPED", "FAILED"):
            continue
        if m is None:  # the next strategy has not begun: nothing known
            break
        if cls.resumable:
            need = _units_left(run, manifest, ms, cls.workdir(run))
            if need is not None:
                out.append(Need(cls.milestone, *need))
        elif stopped_s.get(cls.milestone):
            out.append(Need(cls.milestone, stopped_s[cls.milestone],
                            "the longest attempt stopped before"))
        break
    return out


def _units_left(run: Path, manifest: Manifest, ms: dict[str, Milestone], work: Path
                ) -> tuple[float, str] | None:
    """M3a's units not finished: the one stopped in flight at least as long as it ran, each
    other at least as long as the fastest finished one took (M3a's time grows with the
    datasets and kernels it matches)."""
    m2 = ms.get("M2")
    units = [Path(u) for k in candidate_kernels((m2.figures if m2 else {}).get("kernels") or [],
                                                manifest.measure.min_share)
             if k.get("kind") != "source" for u in k["units"]]
    done = unit_rows.finished_s(work)
    left = [f"{u.parent.name}/{u.name}" for u in units
            if f"{u.parent.name}/{u.name}" not in done]
    stopped, unit = unit_rows.longest_unfinished(work)
    fastest = min(done.values(), default=0.0)
    others = len(left) - (1 if stopped > 0 and unit in left else 0)
    total = stopped + fastest * max(0, others)
    if total <= 0:
        return None
    why = []
    if stopped > 0:
        why.append(f"unit {unit} was stopped after {format_duration(stopped)}")
    if fastest > 0 and others > 0:
        why.append(f"{others} other unit(s) to match, the fastest finished one took "
                   f"{format_duration(fastest)}")
    return total, "; ".join(why)
