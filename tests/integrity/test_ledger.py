"""The prior-best store (zero-regression gate) and the append-only ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.core import ConfigError
from kernforge.harness.ledger import BaselineStore, Ledger, gate_regression


def test_prior_best_gate_and_update(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "best.json")
    first = store.check("saxpy-0", "cpuX", 1.30, record={"variant": "v1"})
    assert first.passed and first.improved and first.prior_source == "recorded kernel"
    assert store.get("saxpy-0", "cpuX")["speedup"] == 1.30
    within = store.check("saxpy-0", "cpuX", 1.28)  # 1.5% below: inside the 2% band
    assert within.passed and not within.improved and within.prior == 1.30
    worse = store.check("saxpy-0", "cpuX", 1.20)
    assert not worse.passed and store.get("saxpy-0", "cpuX")["variant"] == "v1"
    other = store.check("saxpy-0", "gpuY", 1.1)  # another device: its own prior best
    assert other.passed and other.prior == 1.0 and store.get("saxpy-0", "gpuY") is not None
    assert store.get("saxpy-0", "cpuX")["speedup"] == 1.30
    data = json.loads((tmp_path / "best.json").read_text())
    assert data["format"] == "kernforge-baselines" and set(data["cases"]["saxpy-0"]) == {"cpuX", "gpuY"}
    assert not list(tmp_path.glob(".best.json.*.tmp"))  # written atomically, nothing left


def test_store_refuses_a_foreign_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "something"}')
    with pytest.raises(ConfigError, match="not a kernforge baseline store"):
        BaselineStore(bad).check("c", "d", 1.0)


def test_gate_without_store_compares_with_the_recorded_kernel() -> None:
    assert gate_regression(0.985).passed and not gate_regression(0.97).passed
    assert gate_regression(0.97, band=0.05).passed


def test_ledger_appends_and_survives_a_torn_line(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "ledger.jsonl")
    book.append({"case": "a", "verdict": "accepted"})
    book.append({"case": "b", "verdict": "rejected", "reason": "static:timer"})
    with open(tmp_path / "ledger.jsonl", "a") as f:
        f.write('{"case": "c", "verd')  # a crash mid-write
    entries = book.entries()
    assert [e["case"] for e in entries] == ["a", "b"] and "time" in entries[0]
    assert Ledger(tmp_path / "none.jsonl").entries() == []


def test_a_file_that_is_not_a_ledger_is_an_error(tmp_path: Path) -> None:
    other = tmp_path / "evo.yaml"
    other.write_text("evolve:\n  seed: 1\n")
    with pytest.raises(ConfigError, match="is not a ledger: line 1"):
        Ledger(other).entries(must_exist=True)
    listed = tmp_path / "list.jsonl"
    listed.write_text('{"case": "a"}\n[1, 2]\n')
    with pytest.raises(ConfigError, match="line 2"):
        Ledger(listed).entries()


def test_an_append_after_a_torn_line_stays_intact(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    book = Ledger(path)
    book.append({"case": "a", "verdict": "accepted"})
    book.append({"case": "b", "verdict": "rejected"})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])  # truncated mid-line: a crash while writing b
    book.append({"case": "c", "verdict": "accepted"})
    book.append({"case": "d", "verdict": "rejected"})
    assert [e["case"] for e in book.entries()] == ["a", "c", "d"]  # the torn b is skipped
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[2])["case"] == "c"
    path.write_bytes(b"")  # an empty file needs no separator
    book.append({"case": "e"})
    assert path.read_text().count("\n") == 1 and book.entries()[0]["case"] == "e"
