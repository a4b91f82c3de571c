"""Progress when output is not a terminal (issue 32, item 6): a line per step, and the latest
status at least every heartbeat while a step runs."""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

import kernforge
from kernforge.cli.main import main
from kernforge.cli.progress import line_progress


def test_steps_print_at_once_and_updates_with_the_heartbeat() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200)
    assert not console.is_terminal
    with line_progress(console, every=0.3) as lines:
        lines.step("compiling 10 operators")
        lines.update("3/10 done")
        assert "3/10" not in buf.getvalue()
        time.sleep(0.8)  # a long step that never calls back
    out = buf.getvalue().splitlines()
    assert out[0].endswith("compiling 10 operators")
    assert any(line.endswith("... 3/10 done") for line in out[1:]), out


def test_nothing_is_printed_on_a_terminal() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True)
    with line_progress(console, every=0.1) as lines:
        lines.step("x")
        time.sleep(0.3)
    assert buf.getvalue() == ""


@pytest.mark.slow
def test_tune_prints_a_line_per_unit_off_a_terminal(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    k = kernforge.Kernel("void inc(double *x, long n) { for (long i = 0; i < n; i++) "
                         "x[i] += 1.0; }", "inc", backend="cpu")
    with kernforge.record(tmp_path / "rec"):
        k(np.zeros(64), 64)
        k(np.ones(64), 64)
    assert main(["tune", str(tmp_path / "rec"), "--trials", "2", "--preset", "quick",
                 "--repeat", "2", "--in-process", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "1/2 tuning inc-0 (2 evaluations; cache warm:" in out
    assert "2/2 inc-1 done: 2 evaluations" in out


@pytest.mark.slow
def test_a_remeasured_unit_reports_its_study_not_zero(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """``tune --resume --remeasure`` said "done: 0 evaluations, 0 cache hits, best -" for a
    unit whose study was read back and whose winner was measured again."""
    k = kernforge.Kernel("void inc(double *x, long n) { for (long i = 0; i < n; i++) "
                         "x[i] += 1.0; }", "inc", backend="cpu")
    with kernforge.record(tmp_path / "rec"):
        k(np.zeros(64), 64)
    command = ["tune", str(tmp_path / "rec"), "--trials", "3", "--preset", "quick",
               "--repeat", "2", "--in-process", "--out", str(tmp_path / "run")]
    assert main(command) == 0
    first = [ln for ln in capsys.readouterr().out.splitlines() if "inc-0 done:" in ln]
    assert first and "done: 3 evaluations" in first[0]
    assert main([*command, "--resume", "--remeasure"]) in (0, 1)
    done = [ln for ln in capsys.readouterr().out.splitlines() if "inc-0 done:" in ln]
    assert done, "no done line"
    line = done[0]
    assert "0 new evaluations (3 in the study, the others from its earlier run)" in line
    assert "best -" not in line and "best " in line
    assert ("measured again interleaved" in line) or ("recorded configuration stayed" in line)


def test_replay_shows_each_unit_on_stderr_when_its_table_goes_to_a_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``kernforge replay R > table.txt`` said nothing until every unit was done; the lines
    go to stderr, so that the file holds the results alone."""
    k = kernforge.Kernel('def inc(x: "double *", n: "int") -> None:\n    x[:n] += 1.0\n',
                         "inc", backend="null")
    with kernforge.record(tmp_path / "rec"):
        k(np.zeros(64), 64)
        k(np.ones(64), 64)
    assert main(["replay", str(tmp_path / "rec"), "--repeat", "1", "--warmup", "0"]) == 0
    said = capsys.readouterr()
    assert "1/2 replaying inc-0" in said.err and "2/2 replaying inc-1" in said.err
    assert "replaying" not in said.out and "inc-1" in said.out
