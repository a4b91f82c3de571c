"""``kernforge stencil adopt``: forge tables' changes into a dispatch table, with or without
bench evidence (forge/adopt.py), on copies of the committed table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.forge.adopt import adopt
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell

A, B = "star_1/512x512x512/fp32", "box_1/256x256x256/fp32"
C, D = "star_2/256x256x256/fp32", "star_2/512x512x512/fp32"
LATER = "2099-01-01T00:00:00+00:00"  # a forge run after every committed entry


def _table(path: Path, changes: dict[str, dict[str, Any]] | None = None,
           date: str = LATER) -> Path:
    data = json.loads(mx.TABLE_PATH.read_text())
    for cid, params in (changes or {}).items():
        entry = data["cells"][cid]
        op = mx.build(entry["design"], Cell.parse(cid), {**entry["params"], **params})
        assert op is not None, (cid, params)
        entry.update(params={**entry["params"], **params}, source_sha=mx.source_sha(op),
                     date=date)
    path.write_text(json.dumps(data, indent=2))
    return path


def _forged(root: Path, name: str, changes: dict[str, dict[str, Any]] | None = None,
            date: str = LATER, finished: bool = True) -> Path:
    """A forge run's output: its table, and (``finished``) the summary its final pass wrote."""
    (root / name).mkdir()
    table = _table(root / name / "matrix.json", changes, date)
    if finished:
        finals = [{"cell": c, "final": _key(table, c), "regressed": False} for c in changes or {}]
        (root / name / "forge-summary.json").write_text(json.dumps({"final": finals}))
    return table


def _key(table: Path, cid: str) -> str:
    return mx.operator_for(Cell.parse(cid), mx.load_table(table)).key


def _bench(path: Path, date: str, rows: list[tuple[str, str, float, bool]]) -> Path:
    cells = [{"cell": cid, "runners": [
        {"name": "ours", "kind": "ours", "key": key, "status": "ok", "time_s": t,
         "check": {"ok": ok}},
        {"name": "naive", "kind": "baseline", "status": "ok", "time_s": 3 * t}]}
        for cid, key, t, ok in rows]
    path.write_text(json.dumps({"schema": 1, "date": date, "cells": cells}))
    return path


def test_without_bench_every_change_of_a_forge_table_is_adopted(tmp_path: Path) -> None:
    target = _table(tmp_path / "target.json")
    forged = _forged(tmp_path, "f1", {A: {"ty": 16}})
    before = target.read_bytes()
    decisions, _ = adopt(target, [forged], dry_run=True)
    assert [(d.cell, d.adopted) for d in decisions] == [(A, True)]
    assert target.read_bytes() == before  # a dry run writes nothing
    adopt(target, [forged])
    assert "ty=16" in _key(target, A)
    after = json.loads(target.read_text())["cells"]
    untouched = json.loads(before)["cells"]
    assert all(after[c] == untouched[c] for c in untouched if c != A)  # the rest as it was
    assert adopt(target, [forged]) == ([], [])  # already adopted: nothing to do


def test_with_bench_only_confirmed_changes_are_adopted(tmp_path: Path) -> None:
    e = "star_1/256x256x256/fp32"
    target = _table(tmp_path / "target.json")
    forged = _forged(tmp_path, "f1", {A: {"ty": 16}, B: {"tx": 64}, C: {"tx": 16},
                                           D: {"tx": 16}, e: {"tx": 16}})
    old = {cid: _key(target, cid) for cid in (A, B, C, D, e)}
    new = {cid: _key(forged, cid) for cid in (A, B, C, D, e)}
    bench = [_bench(tmp_path / "b1.json", "2026-12-01T00:00:00Z",
                    [(A, old[A], 100e-6, True), (B, old[B], 50e-6, True),
                     (C, old[C], 40e-6, True), (e, old[e], 40e-6, True),
                     (e, new[e], 20e-6, True)]),
             _bench(tmp_path / "b2.json", "2026-12-02T00:00:00Z",
                    [(A, new[A], 90e-6, True),  # 1.11x: adopted
                     (B, new[B], 50.5e-6, True),  # 0.99x: slower, kept
                     (C, new[C], 30e-6, False),  # failed the oracle: rejected
                     (D, new[D], 30e-6, True),  # its old operator never benched
                     (e, new[e], 20e-6, False)])]  # passed before, failed since: vetoed
    # a band: A's 1.11x passes 10%, not 12%
    decisions, _ = adopt(target, [forged], bench, {A}, band=0.12, dry_run=True)
    assert [d.adopted for d in decisions] == [False] and "12.0%" in decisions[0].reason
    decisions, _ = adopt(target, [forged], bench, {A}, band=0.10, dry_run=True)
    assert [d.adopted for d in decisions] == [True]
    decisions, warnings = adopt(target, [forged], bench)
    by = {d.cell: d for d in decisions}
    assert not warnings
    assert by[A].adopted and by[A].ratio == pytest.approx(100 / 90)
    assert not by[B].adopted and "not faster" in by[B].reason and not by[B].undecided
    assert not by[C].adopted and not by[C].undecided and "failed" in by[C].reason
    assert not by[D].adopted and by[D].undecided and "target's operator" in by[D].reason
    assert not by[e].adopted and "failed (b2)" in by[e].reason
    assert [_key(target, x) for x in (A, B, C, D, e)] == [new[A], old[B], old[C], old[D],
                                                            old[e]]



def test_disagreeing_forge_tables_need_the_bench(tmp_path: Path) -> None:
    base = _table(tmp_path / "base.json")
    target = _table(tmp_path / "target.json")
    f1 = _forged(tmp_path, "f1", {A: {"ty": 16}})
    f2 = _forged(tmp_path, "f2", {A: {"tx": 64}})
    decisions, _ = adopt(target, [f1, f2], dry_run=True)
    assert len(decisions) == 2 and not any(d.adopted for d in decisions)
    assert all(d.undecided and "disagree" in d.reason for d in decisions)
    # one run after the other: f1 adopted, then f2 competes with the target's (f1's) operator
    adopt(target, [f1])
    for given in ([f2], [f1, f2]):
        decisions, _ = adopt(target, given, base=base, dry_run=True)
        assert [(d.new, d.adopted, d.undecided) for d in decisions] == [
            (_key(f2, A), False, True)], given
    bench = [_bench(tmp_path / "b.json", "2026-12-02T00:00:00Z",
                    [(A, _key(base, A), 100e-6, True), (A, _key(f1, A), 95e-6, True),
                     (A, _key(f2, A), 80e-6, True)])]
    decisions, _ = adopt(target, [f2], bench, base=base)
    assert [d.adopted for d in decisions] == [True]  # f2 against the target's (f1's) operator
    assert _key(target, A) == _key(f2, A)


def test_failing_bench_rows_are_verdicts(tmp_path: Path) -> None:
    target = _table(tmp_path / "target.json")
    forged = _forged(tmp_path, "f1", {A: {"ty": 16}, B: {"tx": 64}, C: {"tx": 16}})
    bench = [_bench(tmp_path / "b.json", "2026-12-02T00:00:00Z",
                    [(A, _key(target, A), 100e-6, True), (A, _key(forged, A), 90e-6, False),
                     (B, _key(target, B), 50e-6, False), (B, _key(forged, B), 60e-6, True),
                     (C, _key(target, C), 40e-6, True)])]
    by = {d.cell: d for d in adopt(target, [forged], bench)[0]}
    assert not by[C].adopted and by[C].undecided and "new operator" in by[C].reason
    assert not by[A].adopted and not by[A].undecided and "failed" in by[A].reason
    assert by[B].adopted and "target's operator failed" in by[B].reason


def test_stale_unbuildable_and_unfinished_tables_are_not_adopted(tmp_path: Path) -> None:
    base = _table(tmp_path / "base.json")
    target = _table(tmp_path / "target.json", {B: {"tx": 64}})  # adopted from a later run
    stale = _forged(tmp_path, "f1", {A: {"ty": 16}}, date="2020-01-01T00:00:00+00:00")
    # without --base, B (the run's start) looks like a change; it is older than the target's
    decisions, _ = adopt(target, [stale], dry_run=True)
    assert {d.cell: d.reason for d in decisions}[B].startswith("dated before the target")
    assert all(not d.adopted and not d.undecided for d in decisions)  # verdicts
    # dates compare as times, whatever their notation (+05:00 03:00 is 22:00 the day before)
    late = _forged(tmp_path, "f4", {A: {"ty": 16}}, date="2026-12-03T03:00:00+05:00")
    early = _table(tmp_path / "t2.json", {A: {"tx": 64}}, date="2026-12-02T23:00:00Z")
    [d], _ = adopt(early, [late], cells={A}, dry_run=True)
    assert not d.adopted and "dated before" in d.reason
    # an entry that no longer builds
    f2 = _forged(tmp_path, "f2")
    broken = json.loads(f2.read_text())
    broken["cells"][A]["params"]["tx"] = 999
    f2.write_text(json.dumps(broken))
    [d], _ = adopt(target, [f2], base=base, dry_run=True)
    assert d.cell == A and not d.adopted and "does not build" in d.reason
    # runs that may not have finished: a provisional entry left; no summary; an older summary
    f3 = _forged(tmp_path, "f3", {A: {"ty": 16}})
    unfinished = json.loads(f3.read_text())
    unfinished["cells"][C] = {"provisional": {"original": unfinished["cells"][C]}}
    f3.write_text(json.dumps(unfinished))
    f5 = _forged(tmp_path, "f5", {A: {"ty": 16}}, finished=False)
    f6 = _forged(tmp_path, "f6", {A: {"ty": 16}})  # its final pass saw another operator
    (tmp_path / "f6" / "forge-summary.json").write_text(json.dumps(
        {"final": [{"cell": A, "final": _key(base, A), "regressed": False}]}))
    for table, why in ((f3, "provisional"), (f5, "no readable forge-summary.json"),
                       (f6, "not confirmed by its run's final pass")):
        [d], _ = adopt(target, [table], base=base)
        assert d.cell == A and not d.adopted and why in d.reason and d.undecided
    assert "tx=64" in _key(target, B) and "ty=16" not in _key(target, A)
    # a refused copy of an operator does not hide a finished run's copy of it
    good = _forged(tmp_path, "f7", {A: {"ty": 16}})
    [d], _ = adopt(target, [f5, good], base=base, dry_run=True)
    assert d.adopted and d.source == str(good)
    [d], _ = adopt(target, [f5], base=base, allow_unfinished=True)
    assert d.adopted and "ty=16" in _key(target, A)


def test_bad_input_is_a_typed_error(tmp_path: Path) -> None:
    target = _table(tmp_path / "target.json")
    forged = _forged(tmp_path, "f1", {A: {"ty": 16}})
    for text in ('{"cells": {}}', '{"version": 1}', "not json"):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ConfigError):
            adopt(target, [tmp_path / "bad.json"])
    for allow in (False, True):
        with pytest.raises(ConfigError, match="no such dispatch table"):
            adopt(target, [tmp_path / "missing.json"], allow_unfinished=allow)
    odd = json.loads(forged.read_text())
    del odd["cells"][A]["design"]
    forged.write_text(json.dumps(odd))
    with pytest.raises(ConfigError, match="malformed entry"):
        adopt(target, [forged])
    forged = _forged(tmp_path, "f2", {A: {"ty": 16}})
    with pytest.raises(ConfigError, match="band"):
        adopt(target, [forged], band=float("nan"))
    bad = _bench(tmp_path / "b.json", "2026-12-02T00:00:00Z", [(A, "k", 1e-6, True)])
    doc = json.loads(bad.read_text())
    doc["cells"][0]["runners"][0]["time_s"] = "fast"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ConfigError, match="malformed row"):
        adopt(target, [forged], [bad])


def test_the_cli_reports_writes_and_exits_by_outcome(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    target = _table(tmp_path / "target.json")
    forged = _forged(tmp_path, "f1", {A: {"ty": 16}})
    assert main(["stencil", "adopt", str(forged), "--into", str(target), "--dry-run"]) == 0
    assert "would adopt 1 of 1" in capsys.readouterr().out
    assert "ty=16" not in _key(target, A)
    # out of date order: warned; no row of the target's operator: undecided, exit 1
    late = _bench(tmp_path / "late.json", "2026-12-02T00:00:00Z", [(A, _key(forged, A), 1e-6,
                                                                      True)])
    early = _bench(tmp_path / "early.json", "2026-11-01T00:00:00Z", [])
    rc = main(["stencil", "adopt", str(forged), "--into", str(target), "--bench", str(late),
               str(early)])
    out = capsys.readouterr().out
    assert rc == 1 and "warning" in out and "undecided" in out
    assert main(["stencil", "adopt", str(forged), "--into", str(target)]) == 0
    assert "adopted 1 of 1" in capsys.readouterr().out and "ty=16" in _key(target, A)
    assert main(["stencil", "adopt", str(forged), "--into", str(target), "--cell-ids",
                 "star_1/512x512x512/fp23"]) != 0


def test_adopt_never_writes_into_the_package(tmp_path: Path, own_data_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 6: adopt wrote 13 host-emulator picks into the packaged matrix.json.
    By default it now writes the user's own table, which dispatch then reads first; the
    packaged table is refused as a target."""
    packaged = mx.TABLE_PATH.read_bytes()
    forged = _forged(tmp_path, "run", {A: {"ty": 16}})
    mine = own_data_dir / "matrix.json"
    assert not mine.exists() and mx.table_in_use() == mx.TABLE_PATH
    try:
        assert main(["stencil", "adopt", str(forged)]) == 0
        out = capsys.readouterr().out
        assert "your adopted table" in out and str(mine) in out.replace("\n", "")
        assert mx.TABLE_PATH.read_bytes() == packaged  # the package is untouched
        assert mx.table_in_use() == mine
        assert mx.load_table()[A]["params"]["ty"] == 16  # dispatch reads the user's
        assert mx.table_entries(json.loads(packaged))[A]["params"].get("ty") != 16
        with pytest.raises(ConfigError, match="does not write into its own package"):
            adopt(mx.TABLE_PATH, [forged])
        assert main(["stencil", "adopt", str(forged), "--into", str(mx.TABLE_PATH)]) == 2
        assert mx.TABLE_PATH.read_bytes() == packaged
    finally:
        mine.unlink(missing_ok=True)
