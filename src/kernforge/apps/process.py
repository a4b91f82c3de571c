"""Running one command of an application: its directory, its environment, a time limit.

A command runs in its own session, so a time-out kills the whole process group (an ``mpirun``
or a shell script's children too). On Linux the command's direct child is also killed when
kernforge dies (PR_SET_PDEATHSIG), even by ``kill -9``; its own children may survive that, as
they are no children of kernforge (docs/applications.md). Output is captured (and kept in the run's log directory by
the caller); the wall time is measured around the process only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import KernforgeError, exit_cause
from ..core.lifetime import die_with_parent

KERNFORGE_VARS = ("KERNFORGE_DEPLOY", "KERNFORGE_DEPLOY_LOG", "KERNFORGE_RECORD_DIR",
                  "KERNFORGE_KERNELS", "KERNFORGE_MAX_INSTANCES", "KERNFORGE_SKIP",
                  "KERNFORGE_MAX_MB", "KERNFORGE_RECORD_ALL", "KERNFORGE_DEPLOY_VERIFY")


@dataclass(frozen=True)
class Ran:
    argv: tuple[str, ...]
    returncode: int  # 128 + N for signal N; 124 on a time-out
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    killed_by: int = 0  # the signal that killed it (returncode is then 128 + signal)
    timeout_s: float | None = None  # the limit it ran under

    @property
    def ended(self) -> str:
        """How it ended, for reasons: "timed out after 60 s", "killed by SIGSEGV" or
        "exited with status 3" (never a bare 124 or 139)."""
        if self.timed_out:
            return (f"timed out after {self.timeout_s:g} s" if self.timeout_s is not None
                    else "timed out")
        return exit_cause(-self.killed_by if self.killed_by else self.returncode)

    @property
    def output(self) -> str:
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr

    def tail(self, n: int = 600) -> str:
        """The end of the output for a reason: at most ``n`` characters, beginning at a whole
        word (see :func:`tail_text`)."""
        return tail_text(self.output, n)


CUT = "..."


def tail_text(text: str, n: int) -> str:
    """The end of ``text`` (stripped) in at most ``n`` characters for a reason or message:
    where it is cut, it begins at a whole word after "... " (in the middle of one only when
    the next word would leave less than half the room, e.g. a long path: then its end)."""
    text = text.strip()
    if len(text) <= n:
        return text
    room = max(1, n - len(CUT) - 1)
    start = len(text) - room
    if not text[start - 1].isspace():  # inside a word: begin at the next one
        gap = next((i for i in range(start, len(text)) if text[i].isspace()), None)
        if gap is None or gap - start > room // 2:  # that would drop most of the room
            return CUT + text[len(text) - max(1, n - len(CUT)):]
        start = gap
    return f"{CUT} {text[start:].lstrip()}"


def head_text(text: str, n: int) -> str:
    """The beginning of ``text`` in at most ``n`` characters (a kernel's name in a reason):
    where it is cut, it ends at a whole word, or in the middle of one only when no space is
    near, and says so with "..."."""
    if len(text) <= n:
        return text
    keep = text[:max(1, n - len(CUT))]
    space = keep.rfind(" ")
    if space >= len(keep) // 2:
        keep = keep[:space]
    return keep.rstrip() + CUT


def plain_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an unmodified run: no kernforge variable, no interposer preloaded
    (the switch that turns kernforge's changes off)."""
    env = dict(os.environ if base is None else base)
    for k in KERNFORGE_VARS:
        env.pop(k, None)
    pre = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "libkfinterpose" not in p]
    if pre:
        env["LD_PRELOAD"] = ":".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def run(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout_s: float,
        stdin: str | None = None) -> Ran:
    """Run ``argv`` in ``cwd``; a missing program is returncode 127 with the reason."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen(list(argv), cwd=cwd, env=dict(env), text=True,
                                stdin=subprocess.PIPE if stdin is not None else
                                subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True,
                                preexec_fn=die_with_parent(),  # noqa: PLW1509 (no threads)
                                errors="replace")
    except OSError as exc:
        return Ran(tuple(argv), 127, "", f"cannot run {argv[0]!r}: {exc}",
                   time.perf_counter() - t0)
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill(proc)
        out, err = proc.communicate()
        return Ran(tuple(argv), 124, out or "", (err or "") + f"\n(killed after {timeout_s:g} s)",
                   time.perf_counter() - t0, timed_out=True, timeout_s=timeout_s)
    except BaseException:
        _kill(proc)
        raise
    seconds = time.perf_counter() - t0
    rc = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    return Ran(tuple(argv), rc, out, err, seconds, killed_by=max(0, -proc.returncode),
               timeout_s=timeout_s)


def _kill(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def write_log(path: Path, ran: Ran) -> None:
    """The command, its status and its output, for the person reading the run directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"$ {' '.join(ran.argv)}\n# {ran.ended} (exit {ran.returncode}), "
                    f"{ran.seconds:.3f} s\n"
                    f"--- stdout\n{ran.stdout}\n--- stderr\n{ran.stderr}\n", "utf-8")


def child_main(argv: Sequence[str], work: Callable[[dict[str, Any]], object]) -> int:
    """The entry of a GPU child process (operator_gpu, fused_gpu, program_gpu): ``work`` on
    the request file ``argv[0]``; its result (or the replay's failure as a ``nomatch``)
    written atomically to ``argv[1]``."""
    req = json.loads(Path(argv[0]).read_text())
    try:
        result = work(req)
    except KernforgeError as exc:
        result = {"nomatch": f"the replay failed: {exc.message}"}
    tmp = Path(argv[1]).with_suffix(".part")
    tmp.write_text(json.dumps(result, default=str))
    os.replace(tmp, argv[1])
    return 0
