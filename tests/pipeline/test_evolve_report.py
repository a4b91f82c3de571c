"""The evolution report says why proposer calls gave no usable code: a proposer command that
cannot run shows its error in report.md and report.json, not only in evolve.db."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.cli.evolve_cmd import print_outcome
from kernforge.pipeline.evolve import evolve_kernel
from kernforge.pipeline.evolve_config import config_from_dict
from kernforge.pipeline.evolve_report import error_kinds
from kernforge.record import find_recordings, load_recording


def test_error_kinds_count_first_lines_commonest_first() -> None:
    calls = [{"error": None}, {"error": "could not run x: no such file\ndetail"},
             {"error": "could not run x: no such file\nother detail"}, {"error": "timeout"},
             {"error": "  "}]
    assert error_kinds(calls) == [("could not run x: no such file", 2), ("timeout", 1),
                                  ("(no message)", 1)]
    assert error_kinds(calls, most=1) == [("could not run x: no such file", 2)]


def test_a_proposer_that_cannot_run_is_named_in_the_report(
        heat_recordings: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recs = [load_recording(p) for p in find_recordings(heat_recordings)][:1]
    cfg = config_from_dict({"evolve": {"seed": 1, "max_iterations": 2, "eval_slots": 1,
                                       "llm_slots": 1, "max_in_flight": 1},
                            "proposers": [{"kind": "command",
                                           "command": [str(tmp_path / "no-such-agent")]}],
                            "tuner": {"trials": 0}}, "t")
    out = evolve_kernel(recs, cfg, tmp_path / "run")
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    why, n = report["llm_error_kinds"][0]
    assert "could not run" in why and "no-such-agent" in why and n == report["llm_calls"] >= 1
    md = (tmp_path / "run" / "report.md").read_text()
    assert f"proposer error ({n} call" in md and "no-such-agent" in md
    assert out.report.llm_error_kinds == [(why, n)]
    print_outcome(out)  # what `kernforge evolve` prints at the end
    said = " ".join(capsys.readouterr().out.split())
    assert f"proposer error ({n} of {n} calls): could not run" in said and "no-such-agent" in said
