"""The workflow end to end on a program on the fake CUDA driver (built by its manifest with the
host compiler; no GPU): every state, the SQLite record, resume, and the original untouched."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernforge.apps.manifest import AppManifestError, load_manifest
from kernforge.apps.store import AppStore
from kernforge.apps.tree import snapshot
from kernforge.apps.workflow import AppRun
from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.core.jsonio import parse_json
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import AGENT, fake_program, skip_if_busy, write_manifest

ONLY_AGENT = '\n[integrate]\nstrategies = ["operator", "agent"]\n'
# where the end-to-end speed is not what a test is about: a machine loaded by other work may
# make the verdict inconclusive (then nothing is deployed; the milestones are the same)
MEASURED = ("INTEGRATED", "INCONCLUSIVE")


def _manifest(tmp_path: Path, fake: FakeCuda, src: Path, **kw: object) -> Path:
    p = write_manifest(tmp_path / "app.toml", src, fake, **kw)  # type: ignore[arg-type]
    p.write_text(p.read_text().replace('strategies = ["operator", "tune", "agent"]',
                                       'strategies = ["operator", "agent"]'))
    return p


def _run(manifest: Path, out: Path, **kw: object) -> str:
    return AppRun(load_manifest(manifest), out, **kw).run().state  # type: ignore[arg-type]


@pytest.mark.slow
def test_integrated_by_the_agent_and_the_original_untouched(
        tmp_path: Path, fake: FakeCuda) -> None:
    # the agent removes a 0.25 s sleep: the speedup holds unless a run of the program itself
    # takes over a second (with the default 0.05 s, a loaded machine could sink it)
    program = fake_program(tmp_path / "src", sleep=0.25)
    before = snapshot(program)
    out = tmp_path / "run"
    state = _run(_manifest(tmp_path, fake, program), out)
    skip_if_busy(out)
    assert state == "INTEGRATED"
    store = AppStore.open(out)
    ms = {m.name: m for m in store.milestones()}
    assert [ms[n].status for n in ("M1", "M2", "M3", "M4", "M3c")] == ["DONE"] * 5
    assert ms["M3a"].status in ("SKIPPED", "FAILED")  # operator matching: no stencil here
    assert ms["M3c"].figures["changed_files"] == ["run.sh"]
    assert set(ms["M1"].figures["baseline"]) == {"small", "large"}
    assert ms["M2"].figures["units"] >= 5 and ms["M2"].figures["kernels"][0]["seen"] > 0
    m4 = ms["M4"].figures
    assert [d["dataset"] for d in m4["datasets"]] == ["small", "large"]
    assert all(d["speedup"] > 1.2 and d["ci"][0] > 1.0 for d in m4["datasets"])
    assert m4["geomean"] > 1.2 and m4["original_unchanged"] is True
    after = snapshot(program)  # the build added fake_app and kernels.so, changed nothing
    assert {k: v for k, v in after.items() if k in before} == before
    integ = parse_json((out / "integration.json").read_text())
    assert integ["deployed"] and integ["run_from"] == str(out / "m3c" / "source")
    states = [e["status"] for e in store.events() if e["kind"] == "state"]
    assert states == ["PENDING", "INTEGRATED"]
    n_events, n_logs = len(store.events()), len(list((out / "logs").iterdir()))
    store.close()
    # resumed: a finished application is not run again
    assert _run(_manifest(tmp_path, fake, program), out, resume=True) == "INTEGRATED"
    store = AppStore.open(out)
    assert len(store.events()) == n_events and len(list((out / "logs").iterdir())) == n_logs
    with pytest.raises(AppManifestError, match="already holds a run"):
        _run(_manifest(tmp_path, fake, program), out)


@pytest.mark.slow
def test_below_the_floor_is_dropped_with_its_figures(tmp_path: Path, fake: FakeCuda,
                                                     program: Path) -> None:
    m = _manifest(tmp_path, fake, program)
    out = tmp_path / "run"
    state = _run(m, out, agent=f"{{python}} {AGENT} slower")
    skip_if_busy(out)
    assert state == "DROPPED"
    app = AppStore.open(out).app()
    assert app is not None and "below the 0.98x floor: nothing is deployed" in app.reason
    assert "small, large conclusively slower" in app.reason
    m4 = AppStore.open(out).milestone("M4")
    assert m4 is not None and m4.status == "FAILED" and m4.figures["geomean"] < 0.98
    assert parse_json((out / "integration.json").read_text())["deployed"] is False


@pytest.mark.slow
def test_two_rounds_asked_end_to_end_take_the_eight_a_verdict_needs(
        tmp_path: Path, fake: FakeCuda) -> None:
    """Issue 43: INTEGRATED only on a "faster" verdict, which two rounds (six at most) could
    never give at 99%: the first look waits for the eight rounds the interval needs, so the
    agent's clear gain integrates, its interval at its own confidence (the verdict on too few
    rounds: tests/apps/test_endtoend_looks.py)."""
    program = fake_program(tmp_path / "src", sleep=0.25)
    m = _manifest(tmp_path, fake, program)
    m.write_text(m.read_text().replace("e2e_rounds = 3", "e2e_rounds = 2"))
    out = tmp_path / "run"
    code = main(["app", "run", str(m), "--out", str(out), "--agent",
                 f"{{python}} {AGENT} faster"])
    app = AppStore.open(out).app()
    if code == 9 and app is not None and "idle machine" in app.reason:
        pytest.skip(f"the machine was busy: {app.reason[:200]}")  # documented: exit 9
    assert code == 0
    assert app is not None and app.state == "INTEGRATED", app.reason
    assert "[99% CI " in app.reason and "slower" not in app.reason
    m4 = AppStore.open(out).milestone("M4")
    assert m4 is not None and m4.figures["verdict"]["verdict"] == "faster"
    assert all(d["speedup"] > 2 and len(d["ratios"]) == 8 for d in m4.figures["datasets"])
    assert parse_json((out / "integration.json").read_text())["deployed"] is True


def test_round_geomeans_pair_the_datasets_rounds() -> None:
    from kernforge.apps.endtoend import round_geomeans

    got = round_geomeans([{"ratios": [2.0, 1.0, 4.0]}, {"ratios": [0.5, 4.0]}])
    assert got == pytest.approx([1.0, 2.0])  # as many rounds as the dataset with fewest


@pytest.mark.parametrize("agent, why", [
    pytest.param("nothing", "M3c FAILED: the agent changed no file", marks=pytest.mark.slow),
    ("vandal", "M3c FAILED: the original source changed during the agent step"),
    pytest.param(None, "M3c SKIPPED: no agent command", marks=pytest.mark.slow),
])
@pytest.mark.slow
def test_research_when_nothing_integrates(tmp_path: Path, fake: FakeCuda, program: Path,
                                          agent: str | None, why: str) -> None:
    m = _manifest(tmp_path, fake, program, agent=False)
    cmd = None if agent is None else f"{{python}} {AGENT} {agent} {program / 'run.sh'}"
    assert _run(m, tmp_path / "run", agent=cmd) == "RESEARCH"
    app = AppStore.open(tmp_path / "run").app()
    assert app is not None and why in app.reason


@pytest.mark.slow
def test_out_of_scope_below_the_share_threshold(tmp_path: Path, fake: FakeCuda,
                                                program: Path) -> None:
    m = _manifest(tmp_path, fake, program)
    m.write_text(m.read_text().replace("min_share = 0.0", "min_share = 0.5"))
    assert _run(m, tmp_path / "run") == "OUT_OF_SCOPE"
    store = AppStore.open(tmp_path / "run")
    m2 = store.milestone("M2")
    assert m2 is not None and "below the 50 % threshold" in m2.reason
    assert m2.figures["candidate_share"] < 0.5 and m2.figures["ceiling"] >= 1.0
    assert store.milestone("M3") is None


def test_blocked_when_the_build_fails(tmp_path: Path, fake: FakeCuda, program: Path) -> None:
    (program / "fake_app.c").write_text("this is not C\n")
    assert _run(_manifest(tmp_path, fake, program), tmp_path / "run") == "BLOCKED"
    m1 = AppStore.open(tmp_path / "run").milestone("M1")
    assert m1 is not None and m1.status == "FAILED" and "the build failed" in m1.reason


# end to end through kill -9; resume of a finished run: test_integrated_by_the_agent...
@pytest.mark.slow
def test_killed_then_resumed_redoes_only_the_unfinished_milestone(
        tmp_path: Path, fake: FakeCuda) -> None:
    src = fake_program(tmp_path / "src", sleep=0.3)
    m = _manifest(tmp_path, fake, src)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "kernforge", "app", "run", str(m), "--out",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with sqlite3.connect(out / "app.db") as c:
                    row = c.execute("SELECT status FROM milestones WHERE name = 'M4'").fetchone()
            except sqlite3.Error:
                row = None
            if row is not None:
                break
            time.sleep(0.05)
        proc.kill()  # SIGKILL, in the middle of M4
    finally:
        proc.wait()
    store = AppStore.open(out)
    done = {m.name: m.finished for m in store.milestones()}
    assert store.milestone("M4").status == "RUNNING"  # type: ignore[union-attr]
    assert store.app().state == "PENDING"  # type: ignore[union-attr]
    store.close()
    rc = main(["app", "run", str(m), "--out", str(out), "--resume"])
    store = AppStore.open(out)
    again = {m.name: m.finished for m in store.milestones()}
    assert {k: again[k] for k in done if k != "M4"} == {k: v for k, v in done.items()
                                                        if k != "M4"}
    state = store.app().state  # type: ignore[union-attr]
    assert state in MEASURED and rc == (9 if state == "INCONCLUSIVE" else 0)
    assert sum(1 for e in store.events() if e["name"] == "M4" and e["status"] == "RUNNING") == 2


# ---- the run directory: found in review ----------------------------------------------------
ECHO = """
name = "echo"
source = "prog"
build = "true"
[[datasets]]
name = "a"
run = "echo 'result 1.5'"
[check]
kind = "regex"
pattern = 'result ([0-9.]+)'
[measure]
rounds = 1
"""


def _echo(tmp_path: Path) -> Path:
    (tmp_path / "prog").mkdir()
    p = tmp_path / "echo.toml"
    p.write_text(ECHO)
    return p


def test_a_second_run_on_the_same_out_is_refused_while_the_first_holds_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernforge.apps.workflow import _lock
    m, out = _echo(tmp_path), tmp_path / "run"
    out.mkdir()
    held = _lock(out)  # as a running `kernforge app run` holds it
    try:
        assert main(["app", "run", str(m), "--out", str(out), "--resume"]) == 2
        err = capsys.readouterr().err
        assert "in use by another kernforge app run" in err and "pid" in err
        assert not (out / "app.db").exists()  # nothing was touched
    finally:
        import os
        os.close(held)
    assert main(["app", "run", str(m), "--out", str(out)]) == 0  # released: it runs


def test_out_that_is_a_file_is_bad_input(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    m = _echo(tmp_path)
    (tmp_path / "afile").write_text("x")
    assert main(["app", "run", str(m), "--out", str(tmp_path / "afile")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_a_resumed_run_keeps_the_logs_of_the_run_before(tmp_path: Path) -> None:
    m, out = _echo(tmp_path), tmp_path / "run"
    assert main(["app", "run", str(m), "--out", str(out)]) == 0
    first = {p.name: p.read_text() for p in (out / "logs").iterdir()}
    store = AppStore.open(out)  # as if killed in M2: resumed, M2 runs again
    store.begin("M2")
    store.conn.execute("UPDATE app SET state = 'PENDING'")
    store.close()
    assert main(["app", "run", str(m), "--out", str(out), "--resume"]) == 0
    after = {p.name: p.read_text() for p in (out / "logs").iterdir()}
    assert {k: after[k] for k in first} == first and len(after) > len(first)


def test_resume_where_no_run_was_started_is_bad_input(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = _echo(tmp_path)
    typo = tmp_path / "rnu"
    assert main(["app", "run", str(m), "--out", str(typo), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "nothing to resume there" in err and "drop --resume to start a run" in err
    assert not typo.exists()  # nothing was started, nor created
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="nothing to resume there"):
        _run(m, empty, resume=True)
    assert not (empty / "app.db").exists()
    assert main(["app", "run", str(m), "--out", str(typo)]) == 0  # without --resume: runs
    assert main(["app", "run", str(m), "--out", str(typo), "--resume"]) == 0  # now it resumes


@pytest.mark.slow
def test_an_agent_step_redone_after_an_interruption_starts_from_scratch(
        tmp_path: Path, fake: FakeCuda, program: Path) -> None:
    m = _manifest(tmp_path, fake, program, agent=False)
    out = tmp_path / "run"
    assert _run(m, out, agent=f"{{python}} {AGENT} faster") in MEASURED
    assert (out / "m3c" / "changes.diff").read_text()
    store = AppStore.open(out)  # as if interrupted in M3c, once the agent's diff was written
    store.begin("M3")
    store.begin("M3c")
    store.conn.execute("DELETE FROM milestones WHERE name = 'M4'")
    store.conn.execute("UPDATE app SET state = 'PENDING'")
    store.close()
    (out / "m4" / "stale.json").write_text("{}")
    assert _run(m, out, resume=True, agent=f"{{python}} {AGENT} nothing") == "RESEARCH"
    m3c = AppStore.open(out).milestone("M3c")
    assert m3c is not None and m3c.status == "FAILED" and "changed no file" in m3c.reason
    assert not (out / "m3c" / "changes.diff").exists()  # not the interrupted attempt's diff


@pytest.mark.slow
def test_only_an_interrupted_milestone_has_its_folder_emptied(
        tmp_path: Path, fake: FakeCuda, program: Path) -> None:
    m = _manifest(tmp_path, fake, program, agent=False)
    out = tmp_path / "run"
    for mine in (out / "m3c" / "notes.txt", out / "m4" / "keep.txt"):  # the user's own
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.write_text("mine")
    assert _run(m, out, agent=f"{{python}} {AGENT} faster") in MEASURED
    assert (out / "m3c" / "notes.txt").is_file() and (out / "m4" / "keep.txt").is_file()
    store = AppStore.open(out)  # as if killed during M4
    store.begin("M4")
    store.conn.execute("UPDATE app SET state = 'PENDING'")
    store.close()
    assert _run(m, out, resume=True, agent=f"{{python}} {AGENT} faster") in MEASURED
    assert not (out / "m4" / "keep.txt").exists()  # M4 redone from scratch
    assert (out / "m3c" / "notes.txt").is_file()  # M3c was settled: untouched


CPU_APP = Path(__file__).with_name("cpu_app")


@pytest.mark.slow
def test_interrupted_while_tuning_then_resumed_tunes_again(tmp_path: Path) -> None:
    m = tmp_path / "blur.toml"
    m.write_text(f"""
name = "blur2d-cpu"
source = "{CPU_APP}"
build = "true"
[[datasets]]
name = "n256"
run = "{{python}} blur2d.py --n 256 --steps 60"
[check]
kind = "regex"
pattern = 'checksum ([0-9.eE+-]+)'
rel = 1e-12
[measure]
rounds = 1
e2e_rounds = 2
min_share = 0.0
[integrate]
strategies = ["tune"]
tune_trials = 3
""")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "kernforge", "app", "run", str(m), "--out",
                             str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if any((out / "m3b").glob("*/tune/*/study.db")):  # the inner tune's study began
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)  # Ctrl-C, in the middle of M3b
        assert proc.wait(60) == 130
    finally:
        proc.kill()
        proc.wait()
    store = AppStore.open(out)
    assert store.milestone("M3b").status == "RUNNING"  # type: ignore[union-attr]
    store.close()
    rc = main(["app", "run", str(m), "--out", str(out), "--resume"])
    store = AppStore.open(out)
    m3b = store.milestone("M3b")
    assert m3b is not None and m3b.status in ("DONE", "FAILED")
    assert "already holds" not in m3b.reason
    assert [k["tune_exit"] for k in m3b.figures["kernels"]] == [0]  # tuned again, from scratch
    app = store.app()
    assert app is not None and app.state in ("INTEGRATED", "DROPPED", "INCONCLUSIVE",
                                             "RESEARCH")
    assert rc == (9 if app.state == "INCONCLUSIVE" else 0)  # 9: an inconclusive verdict
    if m3b.status == "DONE":  # RESEARCH only when export's gate found the machine busy
        assert app.state in ("INTEGRATED", "DROPPED", "INCONCLUSIVE"), app.reason


@pytest.mark.slow
def test_the_research_reason_is_printed_once_complete_and_wrapped(
        tmp_path: Path, fake: FakeCuda, program: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 8: the RESEARCH reason (~1,000 characters) was printed three times and
    cut mid-word."""
    from kernforge.cli.output import console

    m = _manifest(tmp_path, fake, program, agent=False)
    agent = f"{{python}} {AGENT} vandal {program / 'run.sh'}"
    assert main(["app", "run", str(m), "--out", str(tmp_path / "run"), "--agent", agent]) == 0
    out = capsys.readouterr().out
    app = AppStore.open(tmp_path / "run").app()
    assert app is not None and app.state == "RESEARCH"
    words = " ".join(app.reason.split())
    flat = " ".join(out.split())
    assert flat.count(words) == 1  # complete, once
    assert flat.count("no strategy produced anything to integrate") == 1
    final = out[out.index("heat-fake: RESEARCH:"):]
    assert all(len(line) <= max(40, console.width) or " " not in line.strip()
               for line in final.splitlines())  # wrapped between words
