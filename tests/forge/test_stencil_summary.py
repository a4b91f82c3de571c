"""``kernforge stencil summary``: a forge run's operators against the naive kernel it timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.stencil import matrix as mx


def test_summary_of_a_run_against_the_naive_kernel(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    table = mx.load_table()
    cid = "star_1/512x512x512/fp32"
    log = tmp_path / "perf-log.jsonl"
    log.write_text(json.dumps({"cell": cid, "from": "naive[block=(32, 8, 1)]",
                               "seconds_from": 4 * table[cid]["seconds"]}) + "\n")
    md = tmp_path / "summary.md"
    assert main(["stencil", "summary", "--table", str(mx.TABLE_PATH), "--log", str(log),
                 "--md", str(md)]) == 0
    text = md.read_text()
    assert f"| {cid} | zmarch |" in text and "| 4.00x |" in text
    assert "| fp32 | 1 | 4.00x |" in text  # the geometric mean over the cells it could time
    assert text in capsys.readouterr().out


def test_a_missing_log_is_a_typed_error(tmp_path: Path) -> None:
    assert main(["stencil", "summary", "--table", str(mx.TABLE_PATH),
                 "--log", str(tmp_path / "nope.jsonl")]) == 2
