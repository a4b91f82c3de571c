"""A native unit's evaluator for the study (:func:`kernforge.tune.tune`): one child process
that reads and places the unit once and then evaluates the variants asked of it one at a time
(``python -m kernforge.replay.native_child --serve``), so a study's trials do not each pay for
a process, a context and the placement of the recorded memory.

A variant that kills the child, or outlives ``timeout_s``, costs that evaluation only
(RUNTIME_FAILED or TIMEOUT, with the cause); the next one starts a fresh child. A unit whose data
fails its hash checks is a RecordingFormatError, raised before any variant runs.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

from ..core import Measurement, RecordingFormatError, Status, Tolerance
from ..core.errors import exit_cause
from .native import NativeVariant


class NativeSession:
    """``session.evaluate(variant) -> Measurement`` in a long-lived child; ``close()`` (or the
    ``with`` block's end) ends it. ``placement``: the child's first reply (the regions it
    relocated, the driver calls it refused)."""

    def __init__(self, unit: str | Path, *, warmup: int = 3, repeat: int = 10,
                 tolerance: Tolerance | str | None = None, dtype: str | None = None,
                 flush: bool = True, fixed: bool = True, timeout_s: float = 300.0) -> None:
        self.unit = Path(unit)
        self.timeout_s = timeout_s
        self.request = {"unit": str(unit), "warmup": warmup, "repeat": repeat, "dtype": dtype,
                        "flush": flush, "fixed": fixed,
                        "tolerance": tolerance.to_json() if isinstance(tolerance, Tolerance)
                        else tolerance}
        self.placement: dict[str, Any] = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="kf-native-session-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._send: IO[bytes] | None = None
        self._recv: IO[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self.started = 0  # children started: one, plus one after each lost context

    def __enter__(self) -> NativeSession:  # noqa: PYI034
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
        self._tmp.cleanup()

    def _start(self) -> Measurement | None:
        """A fresh child, placed; a Measurement when it cannot place the unit."""
        req = Path(self._tmp.name) / "request.json"
        req.write_text(json.dumps(self.request))
        ask_r, ask_w = os.pipe()
        tell_r, tell_w = os.pipe()
        self._stderr = open(Path(self._tmp.name) / f"stderr-{self.started}", "w+b")  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "kernforge.replay.native_child", "--serve",
                 str(ask_r), str(tell_w), str(req)], pass_fds=(ask_r, tell_w),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr,
                env=env)
        finally:
            os.close(ask_r)
            os.close(tell_w)
        self._send, self._recv = os.fdopen(ask_w, "wb"), os.fdopen(tell_r, "rb")
        self.started += 1
        first = self._reply()
        if isinstance(first, Measurement):
            return first
        if "recording_error" in first:
            self.close()
            raise RecordingFormatError(first["recording_error"], hint=first.get("hint"))
        if "error" in first:
            self.close()
            return Measurement(Status(first["status"]), first["error"])
        self.placement = first
        return None

    def _reply(self) -> dict[str, Any] | Measurement:
        """The child's next line, or the Measurement of its death or silence."""
        assert self._recv is not None and self._proc is not None
        ready, _, _ = select.select([self._recv], [], [], self.timeout_s)
        line = self._recv.readline() if ready else None
        if line:
            return dict(json.loads(line))
        if line is None:
            self._proc.kill()
            self._proc.wait()
            self.close()
            return Measurement(Status.TIMEOUT, f"no result within {self.timeout_s:.0f} s")
        code = self._proc.wait()
        tail = self._tail()
        self.close()
        return Measurement(Status.RUNTIME_FAILED,
                           f"the replay process {exit_cause(code)}: {tail}".rstrip(": "))

    def _tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace").strip()[-500:]

    def evaluate(self, variant: NativeVariant) -> Measurement:
        """One verified, timed evaluation of ``variant`` at the unit's recorded addresses."""
        if self._proc is None:
            failed = self._start()
            if failed is not None:
                return failed
        assert self._send is not None
        try:
            self._send.write(json.dumps(variant.to_json()).encode() + b"\n")
            self._send.flush()
        except BrokenPipeError:
            pass  # the child is gone: its exit status is read below
        got = self._reply()
        if isinstance(got, Measurement):
            return got
        m = Measurement.from_json(got)
        if m.status is Status.RUNTIME_FAILED:  # the child ends: the next one starts fresh
            self.close()
        return m

    def close(self) -> None:
        """End the child (it exits when its requests end) and release its pipes."""
        for f in (self._send, self._recv):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        self._send = self._recv = None
        if self._proc is not None:
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
