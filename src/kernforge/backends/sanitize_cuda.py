"""compute-sanitizer runs of a cuda-backend variant (the validation gate on the GPU).

The variant and its arguments (the recorded prologue, host arrays, and the scalars) are written
to a request file; for each tool (memcheck, racecheck, initcheck, synccheck) a fresh process,
``compute-sanitizer --tool T --error-exitcode 86 --kernel-name kns=<entry> python -m
kernforge.backends.sanitize_child REQUEST``, compiles the variant as the backend does, uploads
the arguments, launches once and synchronizes. Only the candidate's kernel is checked (the
``--kernel-name`` filter), not CuPy's copies. A finding is the tool's report; the tool's cost is
the process start, the compile and one instrumented launch (seconds, see docs/integrity.md).
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core import Variant
from .sanitize import SanitizerRun

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
FOUND_EXIT = 86
RUN_TIMEOUT_S = 600.0
_EXTRA = {"racecheck": ["--racecheck-report", "hazard"], "initcheck": [], "memcheck": [],
          "synccheck": []}


def find_tool() -> str | None:
    """``$KERNFORGE_COMPUTE_SANITIZER``, else compute-sanitizer on PATH or in the CUDA home."""
    given = os.environ.get("KERNFORGE_COMPUTE_SANITIZER")
    if given:
        return given if Path(given).is_file() else None
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "compute-sanitizer").is_file():
            return str(Path(home) / "bin" / "compute-sanitizer")
    return None


def write_request(path: Path, backend: str, variant: Variant, args: Sequence[Any]) -> None:
    with open(path, "wb") as f:
        pickle.dump({"backend": backend, "variant": variant, "args": list(args)}, f)


def run_tools(backend: str, variant: Variant, args: Sequence[Any],
              tools: Sequence[str] = TOOLS) -> list[SanitizerRun]:
    """Each of ``tools`` once on the variant (``args`` in signature order, host arrays)."""
    tool = find_tool()
    if tool is None:
        why = ("compute-sanitizer not found (PATH, $CUDA_HOME/bin, "
               "$KERNFORGE_COMPUTE_SANITIZER)")
        return [SanitizerRun(t, False, why, 0.0, available=False) for t in tools]
    out = []
    with tempfile.TemporaryDirectory(prefix="kernforge-cs-") as tmp:
        request = Path(tmp) / "request.pkl"
        write_request(request, backend, variant, args)
        for name in tools:
            out.append(_run_one(tool, name, variant.source.entry, request))
    return out


def _run_one(tool: str, name: str, entry: str, request: Path) -> SanitizerRun:
    cmd = [tool, "--tool", name, "--error-exitcode", str(FOUND_EXIT), "--kernel-name",
           f"kns={entry}", *_EXTRA[name], sys.executable, "-m",
           "kernforge.backends.sanitize_child", str(request)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return SanitizerRun(name, True, f"compute-sanitizer --tool {name} did not finish "
                            f"within {RUN_TIMEOUT_S:g} s", time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    report = "\n".join(ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip())
    if proc.returncode == FOUND_EXIT:
        return SanitizerRun(name, True, _trim(report), seconds)
    if proc.returncode != 0:  # the child itself failed: a crash under the tool is a finding
        crashed = "Program hit" in report or "ERROR SUMMARY" in report
        return SanitizerRun(name, crashed, _trim(report), seconds, available=crashed)
    return SanitizerRun(name, False, "", seconds)


def _trim(text: str, limit: int = 6000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... report truncated]"
