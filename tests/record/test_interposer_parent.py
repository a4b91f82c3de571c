"""The program ends with the kernforge process that started it (kf_parent.c): a launcher
killed alone (kill -9) leaves no orphan behind, and only its direct child is bound to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernforge.record import interposer

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG is Linux's")


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _wait_for(pred, timeout: float = 20.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        # a zombie (reaped by nobody yet) has ended: its state says so
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.fixture(scope="module")
def lib() -> Path:
    return interposer.build()


def _launcher(tmp_path: Path, script: str) -> subprocess.Popen[bytes]:
    """`kernforge record` (a launcher that waits for its child) of ``sh -c SCRIPT``."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    return subprocess.Popen([sys.executable, "-m", "kernforge", "record", "-o",
                             str(tmp_path / "r"), "--", "sh", "-c", script], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_the_program_ends_when_its_launcher_is_killed(lib: Path, tmp_path: Path) -> None:
    launcher = _launcher(tmp_path, "sleep 60")
    try:
        assert _wait_for(lambda: bool(_children(launcher.pid))), "the program never started"
        (child,) = _children(launcher.pid)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_for(lambda: not _alive(child), 10.0), "the program outlived its launcher"
    finally:
        for c in _children(launcher.pid):
            os.kill(c, signal.SIGKILL)


def test_only_the_direct_child_is_bound(lib: Path, tmp_path: Path) -> None:
    """The shell (the launcher's child) is bound; a command it starts in the background is the
    program's own business and keeps running when the shell ends."""
    marker = tmp_path / "grandchild.pid"
    launcher = _launcher(tmp_path, f"sleep 60 & echo $! > {marker}; wait")
    grandchild = 0
    try:
        assert _wait_for(lambda: marker.exists() and marker.read_text().strip() != "")
        grandchild = int(marker.read_text())
        (shell,) = _children(launcher.pid)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert _wait_for(lambda: not _alive(shell), 10.0), "the shell outlived its launcher"
        time.sleep(0.3)
        assert _alive(grandchild), "a grandchild was bound to the launcher too"
    finally:
        if grandchild:
            os.kill(grandchild, signal.SIGKILL)


def _preloaded(lib: Path, parent: int, script: str) -> subprocess.CompletedProcess[bytes]:
    """``sh -c SCRIPT`` with the interposer preloaded, as a launcher named ``parent`` starts
    it (this test process is its real parent)."""
    env = {**os.environ, "LD_PRELOAD": str(lib), "KERNFORGE_PARENT_PID": str(parent)}
    env.pop("KERNFORGE_RECORD_DIR", None)
    return subprocess.run(["sh", "-c", script], env=env, capture_output=True, timeout=30,
                          check=False)


def test_a_launcher_dead_before_the_program_started_ends_it(lib: Path) -> None:
    """The launcher killed between its fork and the interposer's start: the program, already
    an orphan when it could ask for the signal, ends at once instead of running on."""
    gone = subprocess.Popen(["true"])
    gone.wait()  # a launcher's PID that no longer exists
    p = _preloaded(lib, gone.pid, "echo ran")
    assert p.returncode == -signal.SIGTERM and b"ran" not in p.stdout, p


def test_a_process_below_a_live_launchers_other_child_runs_on(lib: Path) -> None:
    """The variable reaching a process whose parent is not the launcher (the launcher's child
    did not load the interposer) while the launcher lives: left alone, the variable removed."""
    launcher = subprocess.Popen(["sleep", "60"])
    try:
        p = _preloaded(lib, launcher.pid, 'echo "ran ${KERNFORGE_PARENT_PID:-unset}"')
    finally:
        launcher.kill()
        launcher.wait()
    assert p.returncode == 0 and p.stdout.strip() == b"ran unset", p
