"""How a command of an application ended, in words: a time-out and a signal are named, never
a bare 124 or 139."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernforge.apps.process import Ran, head_text, run, tail_text, write_log


def test_a_time_out_is_named_with_its_limit(tmp_path: Path) -> None:
    ran = run(["sleep", "5"], cwd=tmp_path, env=os.environ, timeout_s=0.2)
    assert ran.returncode == 124 and ran.timed_out
    assert ran.ended == "timed out after 0.2 s"


def test_a_crash_is_named_by_its_signal(tmp_path: Path) -> None:
    ran = run(["sh", "-c", "kill -SEGV $$"], cwd=tmp_path, env=os.environ, timeout_s=10)
    assert ran.returncode == 139 and ran.ended == "killed by SIGSEGV"
    write_log(tmp_path / "log.txt", ran)
    assert "# killed by SIGSEGV (exit 139)" in (tmp_path / "log.txt").read_text()


def test_a_plain_exit_status_stays_one(tmp_path: Path) -> None:
    ran = run(["sh", "-c", "exit 124"], cwd=tmp_path, env=os.environ, timeout_s=10)
    assert ran.ended == "exited with status 124"  # the program's own 124 is no time-out
    assert Ran(("x",), 3, "", "", 0.0).ended == "exited with status 3"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_command_dies_with_a_killed_kernforge(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os
        from pathlib import Path
        from kernforge.apps.process import run
        run(["sh", "-c", "echo $$ > {pidfile}; exec sleep 60"], cwd=Path("."),
            env=os.environ, timeout_s=120)
        """)])
    try:
        deadline = time.monotonic() + 30
        while not (pidfile.is_file() and pidfile.read_text().strip()):
            assert time.monotonic() < deadline and parent.poll() is None
            time.sleep(0.05)
        child = int(pidfile.read_text())
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)  # no cleanup of kernforge's runs
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the command outlived kernforge"
    finally:
        parent.kill()
        parent.wait()


# ---- the end of a command's output in a reason: whole words ---------------------------------
EXPORT_OUT = ("skipped runs/app/m3b/1-n64-heat_step-0/tune/heat_step-0/result.json: measured "
              "while the device was busy (50% busy): re-run it on an idle machine\nnothing to "
              "export: no result under runs/app/m3b/1-n64-heat_step-0/tune is signed, OK, "
              "validated, idle-measured and significant with a speedup above 1")


@pytest.mark.parametrize("n", [40, 77, 120, 150, 200])
def test_the_tail_of_an_output_begins_at_a_whole_word(tmp_path: Path, n: int) -> None:
    ran = run(["sh", "-c", 'printf "%s" "$0" >&2', EXPORT_OUT], cwd=tmp_path, env=os.environ,
              timeout_s=10)
    tail = ran.tail(n)
    assert len(tail) <= n and tail.startswith("... ")
    words = tail.removeprefix("... ").split()
    assert words and all(w in EXPORT_OUT.split() for w in words)  # none cut in the middle
    assert EXPORT_OUT.endswith(tail.removeprefix("... "))
    assert ran.tail(len(EXPORT_OUT)) == EXPORT_OUT  # uncut: as it is, no marker


def test_tail_and_head_of_a_single_long_word() -> None:
    word = "x" * 50
    assert tail_text(word, 10) == "..." + "x" * 7  # no whole word fits: its end, marked
    assert head_text(word, 10) == "x" * 7 + "..."
    assert tail_text("  short  ", 10) == "short"
    # a long last word (a path) that would leave almost nothing after the next space: its end
    text = "error: " + "words " * 20 + "/very/" + "long/" * 120 + "file.py (exit 1)"
    tail = tail_text(text, 600)
    assert len(tail) <= 600 and tail.endswith("file.py (exit 1)") and len(tail) > 300


def test_a_long_kernel_name_is_cut_at_a_word_and_says_so() -> None:
    name = "void heat_kernel<float, 3>(float*, float const*, int)"
    assert head_text(name, 100) == name
    cut = head_text(name, 30)
    assert len(cut) <= 30 and cut == "void heat_kernel<float,..."
