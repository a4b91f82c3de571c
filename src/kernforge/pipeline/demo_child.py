"""A warm process that runs the demo's application again and again, for end-to-end rounds whose
arms cannot share the demo's process: one that deploys a native spec needs the driver
interposer preloaded when the process starts.

Each arm of such a comparison is an :class:`AppProcess`: a child Python process (its own
environment: plain, or preloaded with the interposer in deploy mode) that runs the application
in-process (:func:`kernforge.pipeline.demo_deploy.run_timed`, the same run as the demo's own
end-to-end rounds) whenever it is asked, and answers with the seconds, the output and the
exit status. So every arm pays the interpreter's start-up and CuPy's compilation once, before
the untimed warm-up, as the demo's in-process rounds do, and the rounds time the application's
work. The interposer's counts (launches replaced, fused groups) are written when the process
exits (:meth:`AppProcess.close`).

``python -m kernforge.pipeline.demo_child FD``: the child; requests (one JSON object a line:
``command``, ``spec``) on standard input, replies on descriptor FD.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from ..core import KernforgeError

TIMEOUT_S = 600.0  # one run of the application that takes longer is taken for hung


class AppProcess:
    """One arm: the application run in a warm child process with ``env`` (default: this
    process's); ``spec``: a Python deployment spec active in each run; ``log``: where a
    preloaded interposer writes its counts (read by :meth:`close`); a run that takes longer
    than ``timeout_s`` ends the process and is an error. Calling it runs the
    application once: (seconds, output, launches the Python spec replaced)."""

    def __init__(self, command: Sequence[str], *, spec: Path | None = None,
                 env: Mapping[str, str] | None = None, log: Path | None = None,
                 what: str = "plain", timeout_s: float = TIMEOUT_S) -> None:
        self.command, self.spec, self.log, self.what = list(command), spec, log, what
        self.timeout_s = timeout_s
        self.runs = 0
        self.counts: dict[str, Any] | None = None  # what close() read
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        r, w = os.pipe()
        child_env = dict(os.environ if env is None else env)
        if "libkfinterpose" in child_env.get("LD_PRELOAD", ""):  # kf_parent.c: it ends with us
            child_env["KERNFORGE_PARENT_PID"] = str(os.getpid())
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kernforge.pipeline.demo_child", str(w)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._err,
                env=child_env, pass_fds=(w,))
        except OSError as exc:
            os.close(r)
            raise KernforgeError(f"cannot start a process for the application ({what}): {exc}",
                                 hint="check that the Python interpreter still runs") from None
        finally:
            os.close(w)
        self._replies = os.fdopen(r, "r", encoding="utf-8")

    def __call__(self) -> tuple[float, str, int]:
        assert self.proc.stdin is not None
        request = json.dumps({"command": self.command,
                              "spec": None if self.spec is None else str(self.spec)})
        try:
            self.proc.stdin.write(request.encode() + b"\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self._replies], [], [], self.timeout_s)
            if not ready:
                self.proc.kill()
                raise KernforgeError(f"the application ({self.what}) did not finish within "
                                     f"{self.timeout_s:.0f} s",
                                     hint="run the application alone to see whether it hangs")
            line = self._replies.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            raise KernforgeError(f"the application's process ({self.what}) ended: "
                                 f"{self.stderr_tail()}",
                                 hint="run the application alone with the same deployment")
        reply = json.loads(line)
        status = int(reply["status"])
        self.runs += 1
        if status != 0:
            from .demo_deploy import failed

            raise failed(status, self.what, self.stderr_tail())
        return float(reply["seconds"]), str(reply["output"]), int(reply["substituted"])

    def stderr_tail(self, limit: int = 600) -> str:
        self._err.seek(0)
        text = self._err.read().decode("utf-8", "replace").strip()
        return text[-limit:] or "no message"

    def close(self) -> dict[str, Any]:
        """End the process (it exits as the application would); the interposer's counts when
        ``log`` was given and it wrote them, else {}. Closing again returns the same."""
        if self.counts is not None:
            return self.counts
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._replies.close()
        self._err.close()
        self.counts = {}
        if self.log is not None:
            with contextlib.suppress(OSError, ValueError):
                self.counts = dict(json.loads(self.log.read_text("utf-8")))
        return self.counts

    def __enter__(self) -> Self:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def main(argv: Sequence[str]) -> int:
    """The child: run the application for each request, reply with what the run gave."""
    from .demo_deploy import run_timed

    with os.fdopen(int(argv[0]), "w", encoding="utf-8") as replies:
        for line in sys.stdin:
            req = json.loads(line)
            spec = Path(req["spec"]) if req.get("spec") else None
            seconds, output, substituted, status = run_timed(req["command"], spec)
            replies.write(json.dumps({"seconds": seconds, "output": output,
                                      "substituted": substituted, "status": status}) + "\n")
            replies.flush()
    return 0


if __name__ == "__main__":  # pragma: no cover - the child's entry point
    sys.exit(main(sys.argv[1:]))
