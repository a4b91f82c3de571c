"""``kernforge app batch``: host C programs (built by make with gcc, no GPU) through the
workflow, each once; resumed after a ``kill -9`` of the batch process; stopped at its budget
and resumed by a later batch; the budget shared; the summary and the exit codes."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernforge.apps.batch_report import exit_status, summary_lines
from kernforge.apps.batch_store import BatchStore, Program
from kernforge.apps.budget import format_duration, parse_duration, share
from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import fake_program, write_manifest
from .suite_helpers import PASSING, program


def manifest(root: Path, name: str, source: str = PASSING, *, ms: int = 20,
             rounds: int = 2) -> Path:
    """A program of the fake suite and its manifest: ``ms`` milliseconds a run."""
    src = program(root / "src", name, source, f"./$(program) 100 {ms}")
    path = root / f"{name}.toml"
    path.write_text(textwrap.dedent(f"""
        name = "{name}"
        source = "{src}"
        build = "make"
        timeout_s = 60

        [[datasets]]
        name = "d0"
        run = "./main 100 {ms}"

        [check]
        kind = "regex"
        pattern = '^PASS$'

        [measure]
        rounds = {rounds}
        """))
    return path


def _programs(out: Path) -> dict[str, Program]:
    store = BatchStore.open(out)
    try:
        return {p.name: p for p in store.programs()}
    finally:
        store.close()


def _cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kernforge", "app", "batch", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_durations_and_the_even_share() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400
    assert parse_duration("90s") == 90 and parse_duration("2.5") == 2.5
    for bad in ("soon", "-3m", "0", "3x"):
        with pytest.raises(ConfigError):
            parse_duration(bad)
    assert format_duration(3900) == "1h 05m" and format_duration(250) == "4m 10s"
    # 30 minutes for 3 programs: 10 each; the first takes 4, so the next two get 13 each
    assert share(batch_left_s=1800, programs_left=3, program_budget_s=None,
                 program_spent_s=0) == 600
    assert share(batch_left_s=1800 - 240, programs_left=2, program_budget_s=None,
                 program_spent_s=0) == 780
    # a program's own budget caps its share, over all its runs
    assert share(batch_left_s=1800, programs_left=1, program_budget_s=300,
                 program_spent_s=120) == 180
    assert share(batch_left_s=None, programs_left=4, program_budget_s=None,
                 program_spent_s=0) is None


@pytest.mark.slow
def test_each_program_once_with_its_outcome(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    good = manifest(tmp_path, "good")
    bad = manifest(tmp_path, "bad", PASSING.replace("return 0;", "return 3;"))
    wrong = manifest(tmp_path, "wrong")  # a pattern the program never prints
    wrong.write_text(wrong.read_text().replace("'^PASS$'", "'^PASSED$'"))
    broken = tmp_path / "broken.toml"
    broken.write_text('name = "broken"\nsource = "."\nbuild = "true"\n')
    out = tmp_path / "runs"
    assert main(["app", "batch", str(good), str(bad), str(wrong), str(broken),
                 "--out", str(out)]) == 2
    text = capsys.readouterr().out
    p = _programs(out)
    assert (p["good"].outcome, p["good"].app_state) == ("SKIPPED", "OUT_OF_SCOPE")
    assert (p["bad"].outcome, p["bad"].app_state) == ("FAILED", "BLOCKED")
    assert "d0 exited with status 3" in p["bad"].reason
    # kernforge app run refused it (exit 2): its error and hint are the reason
    assert (p["wrong"].outcome, p["wrong"].app_state) == ("FAILED", "")
    assert "never matches" in p["wrong"].reason and "hint:" in p["wrong"].reason
    assert p["broken"].status == "INVALID" and "no [[datasets]]" in p["broken"].reason
    assert all(p[n].spent_s > 0 and p[n].attempts == 1 for n in ("good", "bad", "wrong"))
    assert "| good | SKIPPED | OUT_OF_SCOPE |" in text and "| bad | FAILED | BLOCKED |" in text
    assert "4 program(s): 3 FAILED, 1 SKIPPED" in text
    assert (out / "apps" / "good" / "app.db").is_file()
    assert "good | " in text  # the run's own progress lines, prefixed
    # again (the broken manifest fixed away): nothing is run twice
    assert main(["app", "batch", str(good), str(bad), "--out", str(out)]) == 0
    assert "good: finished before: SKIPPED (OUT_OF_SCOPE); not run again" in \
        capsys.readouterr().out
    assert _programs(out)["good"].attempts == 1
    # --remeasure runs it again from the start; the earlier run is kept
    assert main(["app", "batch", str(good), str(bad), "--out", str(out),
                 "--remeasure", "go*"]) == 0
    p = _programs(out)
    assert p["good"].attempts == 2 and p["bad"].attempts == 1
    assert (out / "previous" / "good-1" / "app.db").is_file()
    assert main(["app", "batch", "--status", "--out", str(out)]) == 2  # broken is listed
    assert "| broken | FAILED | - |" in capsys.readouterr().out
    # a changed manifest is a new run of its program
    bad.write_text(bad.read_text() + "# reviewed\n")
    assert main(["app", "batch", str(good), str(bad), "--out", str(out)]) == 0
    assert "bad: its manifest changed: run again from the start" in capsys.readouterr().out
    assert _programs(out)["bad"].attempts == 2 and (out / "previous" / "bad-1").is_dir()


@pytest.mark.slow
def test_kill_9_of_the_batch_and_the_next_batch_goes_on(tmp_path: Path) -> None:
    slow = manifest(tmp_path, "slow", ms=700, rounds=4)
    quick = manifest(tmp_path, "quick")
    out = tmp_path / "runs"
    proc = _cli(str(slow), str(quick), "--out", str(out))
    db = out / "apps" / "slow" / "app.db"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # killed while slow's M1 measures its baseline
        if db.is_file():
            with sqlite3.connect(db) as c:
                try:
                    row = c.execute("SELECT status FROM milestones WHERE name = 'M1'"
                                    ).fetchone()
                except sqlite3.OperationalError:  # the file is there, its tables not yet
                    row = None
            if row == ("RUNNING",) and "first run of d0" in _log(out, "slow"):
                break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail(f"slow never started: {proc.communicate()[0]}")
    time.sleep(1.5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    p = _programs(out)
    assert p["slow"].status == "RUNNING" and p["quick"].status == "PENDING"
    _wait_unlocked(out / "apps" / "slow" / "app.lock")  # its app run died with the batch
    again = _cli(str(slow), str(quick), "--out", str(out))
    text = again.communicate(timeout=300)[0]
    assert again.returncode == 0, text
    assert "[1/2] slow: resumed" in text and "[2/2] quick: started" in text
    p = _programs(out)
    assert p["slow"].attempts == 2 and p["quick"].attempts == 1
    assert p["slow"].status == p["quick"].status == "DONE"
    assert p["slow"].outcome == "SKIPPED" and p["slow"].app_state == "OUT_OF_SCOPE"
    commands = [ln for ln in _log(out, "slow").splitlines() if ln.startswith("$ ")]
    assert len(commands) == 2 and not commands[0].endswith("--resume")
    assert commands[1].endswith("--resume")  # its finished milestones are not redone


def _log(out: Path, name: str) -> str:
    p = out / "logs" / f"{name}.log"
    return p.read_text() if p.is_file() else ""


def _wait_unlocked(lock: Path) -> None:
    import fcntl

    deadline = time.monotonic() + 20
    while True:
        fd = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"{lock} is still held: the app run outlived its batch")
            time.sleep(0.2)
        finally:
            os.close(fd)


@pytest.mark.slow
def test_a_program_stopped_at_its_budget_resumes_later(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    slow = manifest(tmp_path, "slow", ms=1500, rounds=5)
    out = tmp_path / "runs"
    assert main(["app", "batch", str(slow), "--out", str(out), "--program-budget", "6s"]) == 1
    text = capsys.readouterr().out
    p = _programs(out)["slow"]
    assert (p.status, p.outcome) == ("STOPPED", "SKIPPED")
    assert p.reason.startswith("stopped at its budget of 6s"), p.reason  # in M1, unless
    # a loaded machine took the 6 s to start Python
    assert 6 <= p.spent_s < 30 and "1 not finished" in text
    first = p.spent_s
    # the next batch, with more time for it, goes on from where it stopped
    assert main(["app", "batch", str(slow), "--out", str(out), "--program-budget", "5m"]) == 0
    text = capsys.readouterr().out
    p = _programs(out)["slow"]
    assert (p.status, p.outcome, p.attempts) == ("DONE", "SKIPPED", 2)
    assert p.spent_s > first and "budget 4m" in text


@pytest.mark.slow
def test_the_batch_budget_is_shared_and_unspent_time_returns(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = [str(manifest(tmp_path, n)) for n in ("a", "b")]
    out = tmp_path / "runs"
    assert main(["app", "batch", *paths, "--out", str(out), "--budget", "10m"]) == 0
    text = capsys.readouterr().out
    assert "[1/2] a: started, budget 5m 00s (10m 00s left for 2 program(s))" in text
    spent_a = _programs(out)["a"].spent_s
    assert f"[2/2] b: started, budget {format_duration(600 - spent_a)}" in text
    assert "of a 10m 00s budget" in text
    # without --budget, what is left of the latest one applies: spent, nothing is started
    c = manifest(tmp_path, "c")
    store = BatchStore.open(out)
    store.set_budget(1.0)
    store.heartbeat("a", _programs(out)["a"].spent_s + 1.0)
    store.close()
    assert main(["app", "batch", *paths, str(c), "--out", str(out)]) == 1
    assert "c: SKIPPED: not started: this batch's budget (1s) is spent; a later batch with " \
        "--budget goes on" in capsys.readouterr().out
    # a new allocation: its --budget is all its own (the time spent before is history)
    assert main(["app", "batch", *paths, str(c), "--out", str(out), "--budget", "5m"]) == 0
    text = capsys.readouterr().out
    assert "[3/3] c: started, budget 5m 00s (5m 00s left for 1 program(s))" in text, text
    assert _programs(out)["c"].status == "DONE" and "over all the batch's runs" in text


def test_the_summary_and_exit_status() -> None:
    def row(name: str, status: str, outcome: str, speedup: float | None = None) -> Program:
        return Program(name, 0, f"{name}.toml", "", status, outcome, "", "why", speedup,
                       60.0, 1, 0.0)

    done = [row("a", "DONE", "INTEGRATED", 1.5), row("b", "DONE", "INTEGRATED", 2.5),
            row("c", "DONE", "INTEGRATED", 1.1), row("d", "DONE", "NOT FASTER", 0.99)]
    lines = summary_lines(done, budget_s=600, spent_s=240)
    assert "| a | INTEGRATED | - | 1.500x | 1m 00s | why |" in lines
    assert "median end-to-end speedup of the 3 INTEGRATED: 1.500x" in lines
    assert "4 program(s): 3 INTEGRATED, 1 NOT FASTER" in lines
    assert lines[-1] == "device time 4m 00s of a 10m 00s budget"
    assert exit_status(done) == 0
    assert exit_status([*done, row("e", "DONE", "INCONCLUSIVE")]) == 9
    assert exit_status([*done, row("e", "STOPPED", "SKIPPED")]) == 1
    assert exit_status([*done, row("e", "INVALID", "FAILED")]) == 2


def test_an_outcome_and_its_state_said_once_when_alike() -> None:
    from kernforge.apps.batch import outcome_words

    assert outcome_words("INCONCLUSIVE", "INCONCLUSIVE") == "INCONCLUSIVE"
    assert outcome_words("FAILED", "BLOCKED") == "FAILED (BLOCKED)"
    assert outcome_words("FAILED", None) == "FAILED (-)"


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = manifest(tmp_path, "good")
    assert main(["app", "batch", "--out", str(tmp_path / "r")]) == 2  # nothing to run
    assert main(["app", "batch", str(good), "--dir", str(tmp_path)]) == 2
    assert main(["app", "batch", "--dir", str(tmp_path / "none")]) == 2
    assert main(["app", "batch", "--dir", str(good)]) == 2
    assert main(["app", "draft", str(good)]) == 2
    err = capsys.readouterr().err
    assert f"--dir {good}: a file, not a directory" in err and f"{good}: a file" in err
    assert main(["app", "batch", str(tmp_path)]) == 2
    assert f"kernforge app batch --dir {tmp_path}" in capsys.readouterr().err
    assert main(["app", "batch", "--status", "--out", str(tmp_path / "none")]) == 2
    twin = tmp_path / "twin.toml"
    twin.write_text(good.read_text())
    assert main(["app", "batch", str(good), str(twin), "--out", str(tmp_path / "r")]) == 2
    with pytest.raises(SystemExit):
        main(["app", "batch", str(good), "--budget", "soon"])
    assert main(["app", "batch", str(good), "--remeasure", "goood", "--out",
                 str(tmp_path / "r2")]) == 2
    assert "--remeasure 'goood' matches no program of the batch (good)" in \
        capsys.readouterr().err
    assert not (tmp_path / "r2" / "batch.db").exists()
    for arch in ("banana", "90", "sm90"):
        with pytest.raises(SystemExit):
            main(["app", "draft", str(tmp_path), "--arch", arch])


@pytest.mark.slow
def test_an_integrated_program_gives_the_median(tmp_path: Path, fake: FakeCuda,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # the fake driver's program whose scripted agent cuts a 0.25 s sleep to a quarter
    src = fake_program(tmp_path / "src", sleep=0.25)
    heat = write_manifest(tmp_path / "heat.toml", src, fake)
    heat.write_text(heat.read_text().replace('strategies = ["operator", "tune", "agent"]',
                                             'strategies = ["operator", "agent"]'))
    out = tmp_path / "runs"
    rc = main(["app", "batch", str(heat), str(manifest(tmp_path, "plain")), "--out", str(out)])
    text = capsys.readouterr().out
    p = _programs(out)["heat-fake"]
    assert p.app_state in ("INTEGRATED", "INCONCLUSIVE"), p.reason  # a busy machine: the latter
    if p.app_state == "INCONCLUSIVE":
        assert rc == 9 and p.outcome == "INCONCLUSIVE"
        pytest.skip("the end-to-end verdict was inconclusive on this (busy) machine")
    assert rc == 0 and p.outcome == "INTEGRATED" and p.speedup is not None and p.speedup > 1.2
    assert f"| heat-fake | INTEGRATED | INTEGRATED | {p.speedup:.3f}x |" in text
    assert f"median end-to-end speedup of the 1 INTEGRATED: {p.speedup:.3f}x" in text


@pytest.mark.slow
def test_time_left_at_the_end_goes_to_a_program_stopped_at_its_share(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # its first run hangs (30 s) once: stopped at its share of 60 s (20 s), it finishes
    # with what the quick programs after it left over, which is more than the 20 s its
    # stopped M1 ran (a shorter leftover would defer it: its M1 needs more than that)
    mark = tmp_path / "hung-once"
    source = PASSING.replace("int n = argc", f'if (access("{mark}", F_OK) != 0) {{ '
                             f'fclose(fopen("{mark}", "w")); sleep(30); }}\n  int n = argc')
    first = manifest(tmp_path, "first", source)
    quick = [str(manifest(tmp_path, n)) for n in ("quick", "quick2")]
    out = tmp_path / "runs"
    rc = main(["app", "batch", str(first), *quick, "--out", str(out), "--budget", "60s"])
    text = capsys.readouterr().out
    p = _programs(out)
    assert "first: SKIPPED: stopped at its budget of 20s in M1" in text
    assert "program(s) stopped at their share or deferred go on" in text, text
    assert rc == 0 and p["first"].status == p["quick"].status == "DONE", text
    assert p["first"].attempts == 2 and p["first"].app_state == "OUT_OF_SCOPE"
    stopped = BatchStore.open(out)
    assert 15 < stopped.stopped_s("first")["M1"] < 40  # what its M1 was known to need
    stopped.close()


def test_status_shows_a_program_of_a_batch_that_ended_unfinished_as_interrupted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernforge.apps.batch_store import in_use, lock

    out = tmp_path / "runs"
    store = BatchStore.open(out)
    store.add("slow", 0, "slow.toml", "")
    store.begin("slow")  # then the batch was killed: the row stays RUNNING
    store.close()
    assert main(["app", "batch", "--status", "--out", str(out)]) == 1
    text = capsys.readouterr().out
    assert "| slow | INTERRUPTED |" in text and "goes on with it" in text
    fd = lock(out)  # a batch running now
    try:
        assert in_use(out)
        assert main(["app", "batch", "--status", "--out", str(out)]) == 1
        assert "| slow | RUNNING | - | - | 0s | running |" in capsys.readouterr().out
    finally:
        os.close(fd)
    assert not in_use(out)
    assert "0 program(s)\n" in "\n".join(summary_lines([], budget_s=None, spent_s=0)) + "\n"
