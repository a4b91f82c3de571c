"""``kernforge record``: an unusable -o is a typed error before the application starts, and
Ctrl-C keeps what was recorded (exit 130, a one-line message, no traceback, no spool left)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kernforge.record import find_recordings, load_recording
from kernforge.record.native_format import SPOOL, read_native
from kernforge.testing.fakedriver import FakeCuda

from .cli_helpers import run

KERNFORGE = [sys.executable, "-m", "kernforge"]

# A Python application: one marker file when it starts, then kernel launches until stopped.
APP = r'''
import pathlib, sys
import numpy as np
import kernforge

pathlib.Path(sys.argv[1]).write_text("started")
SRC = """
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
"""
k = kernforge.Kernel(SRC, "axpy", backend="null")
x, y = np.ones(4096), np.zeros(4096)
while True:
    k(x, y, 0.5, 4096)
'''


# exec the command with SIGINT's default action (a shell's background job ignores it, and
# Python then never raises KeyboardInterrupt)
_EXEC = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
         "os.execv(sys.argv[1], sys.argv[1:])")
SIGINT_DEFAULT = [sys.executable, "-c", _EXEC]


def _unprivileged() -> list[str]:
    """A command prefix under which file permissions apply: root passes them, so root runs
    without the capabilities that override them (setpriv), else the test is skipped."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root ignores file permissions, and setpriv is not there to drop that")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]


def _record(out: Path, app: Path, marker: Path, *prefix: str) -> subprocess.CompletedProcess:
    return subprocess.run([*prefix, *KERNFORGE, "record", "-o", str(out), "--", "python",
                           str(app), str(marker)], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    path = tmp_path / "app.py"
    path.write_text(APP)
    return path


@pytest.mark.slow
def test_an_out_path_that_is_a_file_is_refused_before_the_application_runs(
        tmp_path: Path, app: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    marker = tmp_path / "started"
    for out in (afile, afile / "sub"):
        done = _record(out, app, marker)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert f"-o: {afile}" in done.stderr and "not a directory" in done.stderr
        assert "hint:" in done.stderr
        assert not marker.exists()  # refused before the application started


@pytest.mark.slow
def test_a_read_only_out_is_refused_before_the_application_runs(tmp_path: Path,
                                                                app: Path) -> None:
    prefix = _unprivileged()
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    marker = tmp_path / "started"
    try:
        for out in (ro / "r", ro):  # a directory to create in it, and the directory itself
            done = _record(out, app, marker, *prefix)
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr
            assert f"-o: cannot write into {ro}" in done.stderr and "hint:" in done.stderr
            assert "the application exited" not in done.stderr + done.stdout
            assert not marker.exists()
    finally:
        ro.chmod(0o755)


def _interrupt(cmd: list[str], ready: Callable[[], bool], env: dict[str, str] | None = None,
               sig: signal.Signals = signal.SIGINT) -> subprocess.CompletedProcess:
    """Run ``cmd`` as a terminal would, then press Ctrl-C (SIGINT to its process group) once
    ``ready()``; or send ``sig`` instead (SIGKILL: kill -9 of the whole group)."""
    proc = subprocess.Popen([*SIGINT_DEFAULT, *cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not ready():
            if proc.poll() is not None:
                pytest.fail(f"exited early: {proc.communicate()[1][-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("nothing recorded within 90 s")
            time.sleep(0.05)
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _units(out: Path) -> list[Path]:
    return find_recordings(out) if out.is_dir() else []


@pytest.mark.slow
def test_ctrl_c_keeps_the_recorded_units_and_removes_the_spool(tmp_path: Path,
                                                                app: Path) -> None:
    out = tmp_path / "rec"
    cmd = [*KERNFORGE, "record", "-o", str(out), "--max-instances", "3", "--", "python",
           str(app), str(tmp_path / "started")]
    done = _interrupt(cmd, lambda: len(_units(out)) == 3)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"interrupted: 3 units recorded are kept in {out}"
    assert not (out / SPOOL).exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    for unit in _units(out):
        assert load_recording(unit, verify=True).source.entry == "axpy"


def _two_spooled(fake: FakeCuda, out: Path) -> tuple[list[str], Callable[[], bool]]:
    """``kernforge record`` of the fake program running for ever, two launches of ``heat``
    recorded into ``out``; and a test of when both are in the spool."""
    cmd = [*KERNFORGE, "record", "-o", str(out), "--kernels", "heat", "--max-instances", "2",
           "--", *fake.command(2_000_000_000)]
    spool = out / SPOOL

    def spooled() -> bool:
        return spool.is_dir() and len([p for p in spool.iterdir()
                                       if p.name[:1].isdigit()]) == 2

    return cmd, spooled


def test_ctrl_c_turns_the_spooled_launches_of_a_native_program_into_units(
        fake: FakeCuda, tmp_path: Path) -> None:
    out = tmp_path / "rec"
    spool = out / SPOOL
    done = _interrupt(*_two_spooled(fake, out), env=fake.env)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"interrupted: 2 units recorded are kept in {out}"
    assert not spool.exists()
    assert sorted(u.name for u in _units(out)) == ["heat-0", "heat-1"]
    for unit in _units(out):
        assert read_native(unit, verify=True).entry == "heat"


# two launches of one null-backend kernel: the in-process capture records them, not the driver
ONCE = ('import numpy as np, kernforge\n'
        'k = kernforge.Kernel("def twice(x: \\"const double *\\", y: \\"double *\\", '
        'n: \\"int\\") -> None:\\n    y[:n] = 2 * x[:n]\\n", "twice", backend="null")\n'
        'x, y = np.ones(64), np.zeros(64)\n'
        'k(x, y, 64)\nk(x, y, 64)\n')


def test_kill_9_leaves_every_spooled_launch_to_become_a_unit(fake: FakeCuda,
                                                             tmp_path: Path) -> None:
    out = tmp_path / "rec"
    done = _interrupt(*_two_spooled(fake, out), env=fake.env, sig=signal.SIGKILL)
    assert done.returncode == -signal.SIGKILL
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LD_LIBRARY_PATH", str(fake.libdir))
        assert run("inspect", str(out)) == 0  # finishes the spool the kill left
    assert sorted(u.name for u in _units(out)) == ["heat-0", "heat-1"]
    for unit in _units(out):
        assert read_native(unit, verify=True).entry == "heat"


def test_a_finished_recording_leaves_its_units_and_no_spool(tmp_path: Path) -> None:
    """The in-process capture's counts (.spool/inprocess-PID.json) are read by no one once
    the command ended: removed, with the spool. Another run's files there are not this run's
    to remove."""
    app = tmp_path / "once.py"
    app.write_text(ONCE)
    out = tmp_path / "rec"
    assert run("record", "-o", str(out), "--", sys.executable, str(app)) == 0
    assert sorted(p.name for p in out.iterdir()) == ["twice-0", "twice-1"]
    for unit in find_recordings(out):
        assert load_recording(unit, verify=True).source.entry == "twice"
    older = out / SPOOL / "inprocess-1.json"  # left by an earlier kernforge, or a kill
    older.parent.mkdir()
    older.write_text("{}")
    assert run("record", "-o", str(out), "--", sys.executable, str(app)) == 0
    assert len(find_recordings(out)) == 4 and list(older.parent.iterdir()) == [older]


@pytest.mark.slow
def test_recording_into_a_directory_that_holds_units_says_so(tmp_path: Path) -> None:
    app = tmp_path / "once.py"
    app.write_text(ONCE)
    out = tmp_path / "rec"
    runs = [subprocess.run([*KERNFORGE, "record", "-o", str(out), "--", "python", str(app)],
                           capture_output=True, text=True, timeout=120, check=False)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[1].stderr
    assert "already held" not in runs[0].stdout
    said = " ".join(runs[1].stdout.split())
    assert f"note: {out} already held" in said and "new -o" in said
    assert len(find_recordings(out)) > 1


@pytest.mark.slow  # four recordings of scripts that start Python
def test_a_script_that_starts_python_says_why_it_recorded_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app = tmp_path / "once.py"
    app.write_text(ONCE)
    script = tmp_path / "app.sh"
    script.write_text(f"#!/bin/sh\n{sys.executable} {app}\nexit 3\n")
    script.chmod(0o755)
    for n, cmd in enumerate(([str(script)], ["env", "KF_T=1", str(script)],
                             ["env", "-C", str(tmp_path), "./app.sh", "a.py"])):
        assert run("record", "-o", str(tmp_path / f"r{n}"), "--", *cmd) == 8  # it failed
        said = " ".join(capsys.readouterr().out.split())
        assert "recorded 0 kernel launch(es)" in said
        # the command env runs is named, not env
        assert (f"note: nothing was recorded: no kernel launch reached the CUDA driver. "
                f"{cmd[-2] if '-C' in cmd else cmd[-1]} is not a Python command") in said
        assert "kernforge.Kernel launches (the CPU backend), which do not go through the " \
            "driver, are not recorded" in said
        assert "source are not recorded" not in said  # CuPy's is, by the interposer
        assert "kernforge record -o DIR -- python app.py ARGS" in said
    # what the note advises: the application itself, env's variables before it understood
    assert run("record", "-o", str(tmp_path / "r"), "--", "env", "KF_T=1", sys.executable,
               str(app)) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "recorded 2 kernel launch(es)" in said and "note:" not in said
    assert len(find_recordings(tmp_path / "r")) == 2


def test_a_native_program_whose_launches_the_filters_left_out_gets_no_note(
        on_fake: FakeCuda, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The driver saw its launches: nothing in the note (a Python application without the
    in-process capture) would be true of it. (A --kernels pattern that matches no kernel:
    test_record_filters.py.)"""
    assert run("record", "-o", str(tmp_path / "r"), "--skip", "1000", "--",
               *on_fake.command(2)) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "driver: " in said and "recorded 0 kernel launch(es)" in said
    assert "note:" not in said


def test_env_without_a_command_is_refused_before_anything_runs(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """env alone would print the whole environment (the interposer's variables included);
    env -u X alone exits 125."""
    for n, env in enumerate((["env"], ["env", "-i"], ["env", "-u", "X"])):
        assert run("record", "-o", str(tmp_path / f"r{n}"), "--", *env) == 2
        said = capfd.readouterr()
        assert "env is given no command to run" in " ".join(said.err.split())
        assert "LD_PRELOAD" not in said.out + said.err
        assert not _units(tmp_path / f"r{n}")


def test_the_applications_status_is_not_taken_for_kernforges(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 8: record -- sh -c 'exit 3' returned 3, kernforge's "backend
    unavailable". A failed application is exit 8 with its status printed; --pass-status
    passes its own status through; a signal is 128 + its number, as a shell says."""
    assert run("record", "-o", str(tmp_path / "a"), "--", "sh", "-c", "exit 3") == 8
    said = " ".join(capsys.readouterr().out.split())
    assert "the application exited with status 3" in said and "--pass-status" in said
    assert run("record", "-o", str(tmp_path / "b"), "--pass-status", "--", "sh", "-c",
               "exit 3") == 3
    assert run("record", "-o", str(tmp_path / "c"), "--pass-status", "--", "sh", "-c",
               "kill -TERM $$") == 128 + 15
    assert run("record", "-o", str(tmp_path / "d"), "--", "sh", "-c", "exit 0") == 0


@pytest.mark.parametrize("program", ["python", "native"])
def test_max_instances_0_is_refused_before_the_application_runs(
        program: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--max-instances 0`` recorded nothing and then said "nothing was launched through the
    CUDA driver": it is refused (exit 2) before the application starts."""
    marker = tmp_path / "started"
    command = (["python", "-c", f"open({str(marker)!r}, 'w')"] if program == "python"
               else ["touch", str(marker)])
    assert run("record", "-o", str(tmp_path / "rec"), "--max-instances", "0", "--",
               *command) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--max-instances 0 must be from 1" in err and "0 would record nothing" in err
    assert not marker.exists()
