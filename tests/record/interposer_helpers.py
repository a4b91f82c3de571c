"""Running programs under the interposer directly (no finalization), for the hardening tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda

SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-g")
FINDINGS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def threads_app(out: Path) -> Path:
    """tests/record/fake_threads_app.c, built into ``out``."""
    exe = out / "fake_threads_app"
    if not exe.exists():
        src = Path(__file__).with_name("fake_threads_app.c")
        subprocess.run([interposer.compiler(), "-O1", "-pthread", "-o", str(exe), str(src),
                        "-ldl"], check=True, capture_output=True)
    return exe


def sanitizer_runtime() -> str:
    """The AddressSanitizer runtime to preload first ("" when the compiler has none)."""
    done = subprocess.run([interposer.compiler(), "-print-file-name=libasan.so"],
                          capture_output=True, text=True, check=False)
    path = done.stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else ""


def record_env(fake: FakeCuda, lib: Path, out: Path, extra: Mapping[str, str] | None = None,
               asan: str = "") -> dict[str, str]:
    env = dict(fake.env)
    env.update({"KERNFORGE_RECORD_DIR": str(out), "KERNFORGE_MAX_INSTANCES": "4"})
    env.update(extra or {})
    env["LD_PRELOAD"] = ":".join(p for p in (asan, str(lib)) if p)
    if asan:
        env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    return env


def run(cmd: list[str], env: Mapping[str, str], timeout: float = 60,
        preexec: Callable[[], None] | None = None, stdin: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=dict(env), capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec, input=stdin, check=False)


def messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("kernforge:")]
