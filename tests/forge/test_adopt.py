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


def _table(path: Path, changes: dict[str, dict[str, Any]] | None = None) -> Path:
    data = json.loads(mx.TABLE_PATH.read_text())
    for cid, params in (changes or {}).items():
        entry = data["cells"][cid]
        op = mx.build(entry["design"], Cell.parse(cid), {**entry["params"], **params})
        assert op is not None, (cid, params)
        entry["params"] = {**entry["params"], **params}
        entry["source_sha"] = mx.source_sha(op)
    path.write_text(json.dumps(data, indent=2))
    return path


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
    forged = _table(tmp_path / "f1.json", {A: {"ty": 16}})
    before = target.read_bytes()
    decisions = adopt(target, [forged], dry_run=True)
    assert [(d.cell, d.adopted) for d in decisions] == [(A, True)]
    assert target.read_bytes() == before  # a dry run writes nothing
    adopt(target, [forged])
    assert _key(target, A) == _key(forged, A) and "ty=16" in _key(target, A)
    assert _key(target, B) == _key(tmp_path / "f1.json", B)  # untouched cells stay
    assert adopt(target, [forged]) == []  # already adopted: nothing to do


def test_with_bench_only_confirmed_changes_are_adopted(tmp_path: Path) -> None:
    target = _table(tmp_path / "target.json")
    c, d = "star_2/256x256x256/fp32", "star_2/512x512x512/fp32"
    forged = _table(tmp_path / "f1.json", {A: {"ty": 16}, B: {"tx": 64}, c: {"tx": 16},
                                           d: {"tx": 16}})
    old = {cid: _key(target, cid) for cid in (A, B, c, d)}
    new = {cid: _key(forged, cid) for cid in (A, B, c, d)}
    bench = [_bench(tmp_path / "b1.json", "2026-12-01T00:00:00Z",
                    [(A, old[A], 100e-6, True), (B, old[B], 50e-6, True),
                     (c, old[c], 40e-6, True)]),
             _bench(tmp_path / "b2.json", "2026-12-02T00:00:00Z",
                    [(A, new[A], 90e-6, True),  # faster: adopted
                     (B, new[B], 55e-6, True),  # slower: kept
                     (c, new[c], 30e-6, False),  # failed the oracle: no evidence
                     (d, new[d], 30e-6, True)])]  # its old operator never benched
    decisions = {d.cell: d for d in adopt(target, [forged], bench)}
    assert decisions[A].adopted and decisions[A].ratio == pytest.approx(100 / 90)
    assert not decisions[B].adopted and "not faster" in decisions[B].reason
    assert not decisions[c].adopted and "new operator" in decisions[c].reason
    assert not decisions[d].adopted and "target's operator" in decisions[d].reason
    assert [_key(target, x) for x in (A, B, c, d)] == [new[A], old[B], old[c], old[d]]


def test_disagreeing_forge_tables_need_the_bench(tmp_path: Path) -> None:
    target = _table(tmp_path / "target.json")
    f1 = _table(tmp_path / "f1.json", {A: {"ty": 16}})
    f2 = _table(tmp_path / "f2.json", {A: {"tx": 64}})
    decisions = adopt(target, [f1, f2], dry_run=True)
    assert len(decisions) == 2 and not any(d.adopted for d in decisions)
    assert all("disagree" in d.reason for d in decisions)
    bench = [_bench(tmp_path / "b.json", "2026-12-02T00:00:00Z",
                    [(A, _key(target, A), 100e-6, True), (A, _key(f1, A), 95e-6, True),
                     (A, _key(f2, A), 80e-6, True)])]
    decisions = adopt(target, [f1, f2], bench)
    assert [d.adopted for d in decisions] == [False, True]
    assert _key(target, A) == _key(f2, A)


def test_base_keeps_changes_the_target_made_since_the_runs_started(tmp_path: Path) -> None:
    base = _table(tmp_path / "base.json")
    target = _table(tmp_path / "target.json", {B: {"tx": 64}})  # adopted from another run
    forged = _table(tmp_path / "f1.json", {A: {"ty": 16}})  # started from base
    # without --base, B looks like a change (back to the old operator)
    assert {d.cell for d in adopt(target, [forged], dry_run=True)} == {A, B}
    adopt(target, [forged], base=base)
    assert "ty=16" in _key(target, A) and "tx=64" in _key(target, B)


def test_bad_input_is_a_typed_error_and_the_cli_reports(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    target = _table(tmp_path / "target.json")
    (tmp_path / "bad.json").write_text('{"cells": {}}')
    with pytest.raises(ConfigError, match="not a dispatch table"):
        adopt(target, [tmp_path / "bad.json"])
    with pytest.raises(ConfigError, match="no such dispatch table"):
        adopt(target, [tmp_path / "missing.json"])
    forged = _table(tmp_path / "f1.json", {A: {"ty": 16}})
    rc = main(["stencil", "adopt", str(forged), "--into", str(target), "--dry-run"])
    out = capsys.readouterr().out
    assert rc == 0 and "would adopt 1 of 1" in out and A in out
    assert _key(target, A) != _key(forged, A)
