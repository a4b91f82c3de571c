"""M3a on a kernel recorded on several datasets: the later datasets try the candidates that
ranked best on the first (apps/narrow.py, strategies/narrowing.py), falling back to the full
list when none of them passes; ``narrow_after_first = 0`` tries everything everywhere; a
resumed run narrows to the rows it kept, and a row written before narrowing narrows nothing."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from kernforge.apps import narrow
from kernforge.apps.strategies import Context, unit_rows
from kernforge.apps.strategies import operator as strat
from kernforge.core.jsonio import write_json_atomic

ONE: list[dict[str, Any]] = [{"operator": "tiled", "screen_speedup": 1.4}, {"operator": "naive", "refused": "x"},
       {"operator": "forged", "screen_speedup": 1.9}, {"operator": "wide", "screen_speedup": 1.1}]
FUSED: list[dict[str, Any]] = [{"operator": f"{d}{t}", "steps": t, "screen_speedup": s}
         for d, t, s in [("temporal", 3, 2.0), ("overlap", 3, 1.5), ("temporal", 5, 2.6),
                         ("overlap", 5, 2.4), ("temporal", 7, 1.2), ("overlap", 7, 1.3)]] + \
    [{"operator": "overlap9", "steps": 7, "refused": "OUT differs"}]


def test_the_ranking_and_the_preferred_candidates() -> None:
    assert narrow.ranked(ONE, fused=False) == [["forged", 1.9], ["tiled", 1.4], ["wide", 1.1]]
    ranking = narrow.ranked(FUSED, fused=True)
    assert [r[0] for r in ranking] == [[5, "temporal5"], [5, "overlap5"], [3, "temporal3"],
                                       [3, "overlap3"], [7, "overlap7"], [7, "temporal7"]]
    # the K best pairs, then the best of every T not among them (another T may still win)
    assert narrow.preferred(ranking, 2, fused=True) == [[5, "temporal5"], [5, "overlap5"],
                                                        [3, "temporal3"], [7, "overlap7"]]
    assert narrow.preferred(ranking, 4, fused=True) == [[5, "temporal5"], [5, "overlap5"],
                                                        [3, "temporal3"], [3, "overlap3"],
                                                        [7, "overlap7"]]
    assert narrow.preferred(narrow.ranked(ONE, False), 2, fused=False) == ["forged", "tiled"]
    # ties are ordered by key, not by the order the child tried them in
    tie = [{"operator": "b", "screen_speedup": 1.0}, {"operator": "a", "screen_speedup": 1.0}]
    assert narrow.ranked(tie, False) == narrow.ranked(tie[::-1], False) == [["a", 1.0],
                                                                            ["b", 1.0]]


def test_a_child_keeps_the_preferred_and_all_when_none_is_among_its_candidates() -> None:
    items = [(3, "a"), (5, "b"), (5, "c")]
    assert narrow.keep(items, [[5, "c"], [7, "z"]], lambda c: list(c)) == [(5, "c")]
    assert narrow.keep(items, [[7, "z"]], lambda c: list(c)) == items
    assert narrow.keep(items, None, lambda c: list(c)) == items
    assert narrow.keep(["x", "y"], ["y"], str) == ["y"]


@dataclass
class _Found:  # OperatorMatch's and FusedMatch's interface
    spec_path: Path
    speedup: float
    tried: tuple[dict[str, Any], ...] = ()
    ci: tuple[float, float] = (1.1, 2.0)
    cell: str = "c"
    note: str = "n"
    steps: int = 5
    gcells_s: float | None = None
    recognized: str = "star 3D"


@dataclass
class _Not:
    reason: str
    tried: tuple[dict[str, Any], ...] = ()
    recognized: str | None = "star 3D"


class _Matcher:
    """A fake matcher module: each path's candidates those of ONE and FUSED, a preferred
    list honoured as the GPU children honour it (:func:`narrow.keep`); ``fail_fused``: the
    narrowed fusion on that dataset passes nothing; ``gate``: the narrowed one-launch
    candidates pass their checks and lose at the gate there."""

    def __init__(self, fail_fused: str = "", gate: str = "") -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.fail_fused, self.gate = fail_fused, gate

    def match_unit(self, unit: Path, *, out_dir: Path, repeat: int, prefer: Any = None
                   ) -> _Found | _Not:
        self.calls.append(("one-launch", unit.parent.name, prefer))
        rows = narrow.keep(ONE, prefer, lambda r: r["operator"])
        if prefer and unit.parent.name == self.gate:
            return _Not("matched by forged, not deployed: below the gate", tuple(rows))
        return _Found(out_dir / "one.json", 1.5, tuple(rows))

    def fuse_unit(self, unit: Path, *, out_dir: Path, repeat: int, prefer: Any = None
                  ) -> _Found | _Not:
        self.calls.append(("fused", unit.parent.name, prefer))
        rows = narrow.keep(FUSED, prefer, lambda r: [r["steps"], r["operator"]])
        if prefer and unit.parent.name == self.fail_fused:
            return _Not("no fused operator passed", tuple({**r, "refused": "OUT differs"}
                                                          for r in rows))
        return _Found(out_dir / "fused.json", 2.5, tuple(rows))


def _context(tmp_path: Path, m: _Matcher, monkeypatch: pytest.MonkeyPatch, k: int = 2,
             said: list[str] | None = None) -> Context:
    mod = types.ModuleType("kf_test_narrow")
    mod.match_unit = m.match_unit  # type: ignore[attr-defined]
    mod.fuse_unit = m.fuse_unit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kf_test_narrow", mod)
    monkeypatch.setattr(strat, "MODULE", "kf_test_narrow")
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    manifest = types.SimpleNamespace(name="laplace3d", env={}, integrate=types.SimpleNamespace(
        match_repeat=3, lift_search_trials=0, narrow_after_first=k),
        measure=types.SimpleNamespace(min_share=0.05))
    units = [tmp_path / "rec" / d / "lap-0" for d in ("n256", "n320", "n384")]
    kernels = [{"name": "lap", "units": [str(u) for u in units], "share": 1.0,
                "kind": "native"}]
    return Context(cast(Any, manifest), cast(Any, None), tmp_path / "run", kernels, 1.0, {},
                   (said if said is not None else []).append)


def _rows(o: Any) -> dict[str, dict[str, Any]]:
    return {Path(r["unit"]).parent.name: r for r in o.figures["kernels"]}


def test_later_datasets_try_the_first_ones_best(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    m, said = _Matcher(), cast(list[str], [])
    o = strat.OperatorStrategy().apply(_context(tmp_path, m, monkeypatch, 2, said))
    assert o.status == "DONE", o.reason
    fused_pref = [[5, "temporal5"], [5, "overlap5"], [3, "temporal3"], [7, "overlap7"]]
    assert m.calls == [("one-launch", "n256", None), ("fused", "n256", None)] + [
        c for d in ("n320", "n384") for c in (("one-launch", d, ["forged", "tiled"]),
                                              ("fused", d, fused_pref))]
    rows = _rows(o)
    assert "narrowed" not in rows["n256"]
    assert rows["n256"]["ranked"]["fused"][0] == [[5, "temporal5"], 2.6]
    got = rows["n320"]["narrowed"]
    assert got["note"] == "narrowed to the 2 best of n256" and got["from"] == "n256"
    assert got["paths"]["one-launch"] == {"preferred": ["forged", "tiled"],
                                          "tried": ["tiled", "forged"]}
    assert got["paths"]["fused"]["tried"] == [[3, "temporal3"], [5, "temporal5"],
                                              [5, "overlap5"], [7, "overlap7"]]
    assert "fallback" not in got["paths"]["fused"] and rows["n320"]["matched"]
    assert rows["n384"]["narrowed"]["from"] == "n256"  # always the first dataset's
    assert sum("(narrowed to the 2 best of n256)" in s for s in said) == 2, said


def test_none_of_the_narrowed_passes_and_the_full_list_is_tried(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _Matcher(fail_fused="n320", gate="n320")
    o = strat.OperatorStrategy().apply(_context(tmp_path, m, monkeypatch, 1))
    fused = [c for c in m.calls if c[0] == "fused" and c[1] == "n320"]
    assert [c[2] is None for c in fused] == [False, True]  # narrowed, then everything
    # a candidate that passed its checks and lost at the gate: the full list is not tried
    one = [c for c in m.calls if c[0] == "one-launch" and c[1] == "n320"]
    assert [c[2] for c in one] == [["forged"]]
    assert "fallback" not in _rows(o)["n320"]["narrowed"]["paths"]["one-launch"]
    row = _rows(o)["n320"]
    info = row["narrowed"]["paths"]["fused"]
    assert info["fallback"] == ("none of them passed (no fused operator passed): the full "
                                "list tried")
    assert row["matched"] and row["path"] == "fused 5 steps alone"
    assert len(row["ranked"]["fused"]) == 6  # the full list's ranking


def test_zero_tries_everything_on_every_dataset(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    m = _Matcher()
    o = strat.OperatorStrategy().apply(_context(tmp_path, m, monkeypatch, 0))
    assert len(m.calls) == 6 and all(c[2] is None for c in m.calls)
    assert not any("narrowed" in r for r in o.figures["kernels"])


def test_a_resumed_run_narrows_to_the_rows_it_kept(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    m = _Matcher()
    ctx = _context(tmp_path, m, monkeypatch, 2)
    strat.OperatorStrategy().apply(ctx)
    work = strat.OperatorStrategy.workdir(ctx.out)
    for d in ("n320", "n384"):  # stopped after the first dataset's unit
        (work / d / "lap-0" / unit_rows.ROW).unlink()
    m.calls.clear()
    o = strat.OperatorStrategy().apply(ctx)
    assert o.figures["kept_units"] == 1 and [c[1] for c in m.calls] == ["n320", "n320",
                                                                         "n384", "n384"]
    assert all(c[2] for c in m.calls) and _rows(o)["n384"]["narrowed"]["from"] == "n256"
    # a row written before narrowing (no ranking): kept as it is, the next datasets try all
    row = unit_rows.load(work / "n256" / "lap-0")
    assert row is not None
    del row["ranked"]
    write_json_atomic(work / "n256" / "lap-0" / unit_rows.ROW, row)
    for d in ("n320", "n384"):
        (work / d / "lap-0" / unit_rows.ROW).unlink()
    m.calls.clear()
    o = strat.OperatorStrategy().apply(ctx)
    assert [c[1] for c in m.calls][:2] == ["n320", "n320"] and m.calls[0][2] is None
    assert "narrowed" not in _rows(o)["n320"]
    assert _rows(o)["n384"]["narrowed"]["from"] == "n320"  # the first with a ranking


def test_the_preferred_candidates_reach_each_child_through_its_request(
        heat_unit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """match_unit, fuse_unit and lift_unit write ``prefer`` into the request the child reads
    (the child's main run here in-process: its session records what it was given)."""
    import importlib
    import subprocess

    from kernforge.apps import operator_match as om

    got: dict[str, Any] = {}

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        mod = importlib.import_module(cmd[2])
        monkeypatch.setattr(mod, "session", lambda *a: got.update({cmd[2]: a}) or
                            {"nomatch": "recorded"})
        mod.main(cmd[3:])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(om.subprocess, "run", run)
    om.match_unit(heat_unit, out_dir=tmp_path / "o", prefer=["forged"])
    om.fuse_unit(heat_unit, out_dir=tmp_path / "f", steps=(3, 5), prefer=[[5, "temporal5"]])
    om.lift_unit(heat_unit, out_dir=tmp_path / "l", prefer=["plain_a"])
    om.match_unit(heat_unit, out_dir=tmp_path / "o")
    assert got["kernforge.apps.operator_gpu"][-1] is None  # no narrowing: no list
    got.pop("kernforge.apps.operator_gpu")
    om.match_unit(heat_unit, out_dir=tmp_path / "o", prefer=["forged"])
    assert got["kernforge.apps.operator_gpu"][-1] == ["forged"]
    assert got["kernforge.apps.fused_gpu"][-2:] == ([3, 5], [[5, "temporal5"]])
    assert got["kernforge.apps.program_gpu"][-1] == ["plain_a"]
