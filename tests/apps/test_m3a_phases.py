"""Where M3a's time goes: a GPU child's exclusive phase timings (apps/phases.py), the parent's
wall time around it, the one-line summary, and each path's figures in the M3a row and its
progress line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kernforge.apps import phases as ps
from kernforge.apps.strategies import operator as strat


class _Clock:
    """A clock that advances only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Replay:
    def __init__(self, clock: _Clock) -> None:
        self.clock, self.restored = clock, 0

    def restore(self, only_written: bool = False) -> None:
        self.clock.now += 0.5 if only_written else 2.0
        self.restored += 1

    def run(self) -> None:  # restores itself first, as a reference run does
        self.restore()
        self.clock.now += 1.0


def test_an_inner_phase_counts_in_its_own_not_in_the_outer_one() -> None:
    clock = _Clock()
    ph = ps.Phases(clock)
    rp = _Replay(clock)
    ph.timed(rp, "restore", "state")
    ph.timed(rp, "run", "reference")
    with ph("check", 1):
        clock.now += 3.0
        rp.run()  # 1 s reference, 2 s state
        rp.restore(only_written=True)  # 0.5 s state
    with ph("check", 1):
        clock.now += 1.0
    clock.now += 0.25  # outside any phase
    f = ph.figures(candidates=4)
    got = {k: (v["s"], v["n"]) for k, v in f["phases"].items()}
    assert got == {"reference": (1.0, 0), "check": (4.0, 2), "state": (2.5, 0)}
    assert list(f["phases"]) == ["reference", "check", "state"]  # in ps.ORDER
    assert f["total_s"] == 7.75 and f["candidates"] == 4
    assert rp.restored == 2  # the wrapped methods still do their work


def test_a_phase_that_raises_is_still_counted() -> None:
    clock = _Clock()
    ph = ps.Phases(clock)
    with pytest.raises(ValueError), ph("load", 1):
        clock.now += 0.5
        raise ValueError("no image")
    assert ph.figures()["phases"] == {"load": {"s": 0.5, "n": 1}}


def test_the_parent_wall_time_adds_the_process_start() -> None:
    f = {"total_s": 10.0, "candidates": 3,
         "phases": {"compile": {"s": 4.0, "n": 3}, "check": {"s": 6.0, "n": 3}}}
    w = ps.with_wall(f, 12.5)
    assert w is not None and w["wall_s"] == 12.5
    assert list(w["phases"]) == ["start", "compile", "check"]
    assert w["phases"]["start"] == {"s": 2.5, "n": 1}
    assert ps.with_wall(None, 3.0) is None and ps.with_wall({}, 3.0) is None
    assert ps.summary("fused step", w) == ("fused step: 3 candidates in 12.5 s: process "
                                           "start 2.5 s, compile 4.0 s, checks 6.0 s")
    assert ps.summary("sequence", {"wall_s": 2.04}) == "sequence: 2.0 s"
    assert ps.summary("lifted", None) == "lifted: no phase timings"


@dataclass
class _Found:  # OperatorMatch's and FusedMatch's interface, with the child's phases
    spec_path: Path
    speedup: float
    ci: tuple[float, float] = (1.0, 2.0)
    cell: str = "c"
    note: str = "n"
    steps: int = 7
    gcells_s: float | None = None
    companions: tuple[dict[str, Any], ...] = ()
    phases: dict[str, Any] | None = None


@dataclass
class _Matcher:
    fused: object
    calls: list[dict[str, Any]] = field(default_factory=list)

    def fuse_unit(self, unit: Path, **kw: Any) -> object:
        self.calls.append({"unit": unit, **kw})
        return self.fused


def _figures(n: int, compile_s: float) -> dict[str, Any]:
    return {"total_s": compile_s + 1.0, "wall_s": compile_s + 2.0, "candidates": n,
            "phases": {"start": {"s": 1.0, "n": 1}, "compile": {"s": compile_s, "n": n},
                       "final": {"s": 1.0, "n": 1}}}


def test_each_path_says_where_its_time_went_in_the_row_and_the_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    told: list[str] = []
    fused = _Found(tmp_path / "s.json", 2.0, phases=_figures(27, 12.0))
    one = _Found(tmp_path / "one.json", 1.3, phases=_figures(5, 3.0))
    seq = {"unit": str(tmp_path / "seq"), "steps": 9, "requested": 9, "ended": "complete",
           "launches": 9, "other_kernels": []}
    row = strat._paths(_Matcher(fused), tmp_path / "unit", tmp_path, 3, one, seq,
                       progress=told.append)
    assert row["phases"] == {"one-launch": one.phases, "fused step": fused.phases}
    assert told[0] == ("one-launch: 5 candidates in 5.0 s: process start 1.0 s, compile "
                       "3.0 s, final timing 1.0 s")
    assert told[-1] == ("fused step: 27 candidates in 14.0 s: process start 1.0 s, compile "
                        "12.0 s, final timing 1.0 s")
    told.clear()  # a path whose child reported nothing adds no line and no figures
    row = strat._paths(_Matcher(_Found(tmp_path / "s.json", 2.0)), tmp_path / "unit",
                       tmp_path, 3, _Found(tmp_path / "one.json", 1.3), seq,
                       progress=told.append)
    assert "phases" not in row and len(told) == 1
