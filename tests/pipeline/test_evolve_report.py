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


@pytest.mark.slow
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


def test_a_rejected_winner_shows_its_interleaved_figure_everywhere(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 8: evolve printed "best seed REJECTED, no interleaved measurement" while
    report.md held the interleaved 0.6733x that rejected it. The command, report.md and the
    demo now print one text, with the figure whenever one was measured."""
    from kernforge.core import Status
    from kernforge.evolve.types import Program
    from kernforge.harness import ABResult
    from kernforge.pipeline.evolve import EvolveOutcome
    from kernforge.pipeline.evolve_final import Final, measurement_text
    from kernforge.pipeline.evolve_report import Report, _markdown

    ab = ABResult(ratios=(0.66, 0.6733, 0.69), samples_a=((1.0,),) * 3,
                  samples_b=((1.5,),) * 3, first=("a", "b", "a"), ci_low=0.61, ci_high=0.72,
                  confidence=0.99)
    seed = Program(id="seed", code="x", parent_id=None, island=0, generation=0, fitness=1e-3,
                   status=Status.OK)
    final = Final(seed, {}, None, None, 1.0, "REJECTED",
                  "regression:prior-best: 0.673x is slower", None, None, measured=ab)
    text = measurement_text(final)
    assert "REJECTED" in text and "0.673x [99% CI 0.610, 0.720]" in text
    assert "no interleaved measurement" not in text and "not counted" in text
    report = Report("k", 1.0, "REJECTED", 1, 1, 0, 0, 0, 1.0, 0.0, 0.0, 1.0, 1.0)
    assert text in _markdown(report, final)
    print_outcome(EvolveOutcome("k", Path("run"), None, None, final, report))  # type: ignore[arg-type]
    assert text in " ".join(capsys.readouterr().out.split())
    unchanged = Final(seed, {}, None, None, 1.0, "UNCHANGED", "the recorded kernel stayed the "
                      "best", None, None)
    assert measurement_text(unchanged) == ("UNCHANGED, no interleaved measurement (the recorded "
                                           "kernel stayed the best)")
