"""compute-sanitizer runs of a cuda-backend variant (the validation gate on the GPU).

The variant and its arguments (the recorded prologue, host arrays, and the scalars) are written
to a request file; for each tool (memcheck, racecheck, initcheck, synccheck) a fresh process,
``compute-sanitizer --tool T --error-exitcode 86 --kernel-name kns=<entry> python -m
kernforge.backends.sanitize_child REQUEST``, compiles the variant as the backend does, uploads
the arguments, launches once and synchronizes. Only the candidate's kernel is checked (the
``--kernel-name`` filter), not CuPy's copies. A finding is the tool's report; the tool's cost is
the process start, the compile and one instrumented launch (seconds, see docs/integrity.md).
The four run at the same time. Each is watched as it prints and stopped at its first finding
(one rejects the candidate: a racy kernel on a large grid would otherwise make racecheck report
for minutes), else killed, with the process it watches, after ``$KERNFORGE_SANITIZER_TIMEOUT_S``
(default 300 s: a ``timed_out`` run, ``sanitizer:timeout``).
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..core import Variant
from .sanitize import TIMEOUT_ENV, SanitizerRun, timeout_s
from .sanitize_watch import watch

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
FOUND_EXIT = 86
PARALLEL_ENV = "KERNFORGE_SANITIZER_PARALLEL"
# racecheck: one report per hazard, printed as the tool processes them, so that the watcher
# sees the first one early (an analysis report sums up the launch's hazards: it can come only
# once all of them, one per byte and block on a racy large grid, were processed); no host
# backtrace of the launch with each report (it is always the sanitizer child's)
_EXTRA = {"racecheck": ["--racecheck-report", "hazard", "--show-backtrace", "device"],
          "initcheck": [], "memcheck": [], "synccheck": []}
# the first line of a report that is a finding, as the tools word it (error level: a racecheck
# warning, or a finding worded otherwise, is decided by the exit status when the tool ends)
FIRST_FINDING = re.compile(
    r"^=+ +(?:error: +)?(?:potential (?:raw|war|waw) hazard|race reported between"
    r"|invalid __\w+__ (?:read|write|atomic)|uninitialized __\w+__ memory|barrier error"
    r"|misaligned address|out-of-range (?:shared|local))", re.IGNORECASE)


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
    """Each of ``tools`` once on the variant (``args`` in signature order, host arrays). The
    tools run at the same time, one process each (their cost is mostly each process's start,
    CuPy's and the compile; ``KERNFORGE_SANITIZER_PARALLEL=0``: one after another); a tool
    that could not run beside the others (no report, no finding) is run again alone."""
    tool = find_tool()
    if tool is None:
        why = ("compute-sanitizer not found (PATH, $CUDA_HOME/bin, "
               "$KERNFORGE_COMPUTE_SANITIZER)")
        return [SanitizerRun(t, False, why, 0.0, available=False) for t in tools]
    entry = variant.source.entry
    with tempfile.TemporaryDirectory(prefix="kernforge-cs-") as tmp:
        request = Path(tmp) / "request.pkl"
        write_request(request, backend, variant, args)
        if len(tools) < 2 or os.environ.get(PARALLEL_ENV, "1").strip() in ("0", "false", "no"):
            return [_run_one(tool, name, entry, request) for name in tools]
        with ThreadPoolExecutor(max_workers=len(tools)) as pool:
            out = list(pool.map(lambda name: _run_one(tool, name, entry, request), tools))
        return [r if r.available else _run_one(tool, r.tool, entry, request) for r in out]


def _run_one(tool: str, name: str, entry: str, request: Path) -> SanitizerRun:
    """One tool's run, watched as it prints (:func:`~.sanitize_watch.watch`): stopped after
    its first finding (the candidate is rejected on it, with that report); past
    :func:`~.sanitize.timeout_s` the tool and the Python it watches are killed and the run is
    a ``timed_out`` finding."""
    cmd = [tool, "--tool", name, "--error-exitcode", str(FOUND_EXIT), "--kernel-name",
           f"kns={entry}", *_EXTRA[name], sys.executable, "-m",
           "kernforge.backends.sanitize_child", str(request)]
    limit = timeout_s()
    w = watch(cmd, limit, FIRST_FINDING)
    if w.how == "timeout":
        tail = "\n".join(w.output.strip().splitlines()[-20:])
        return SanitizerRun(name, True, (
            f"compute-sanitizer --tool {name} did not finish within {limit:g} s (its start, "
            f"the compile and one instrumented launch of the candidate) and reported no "
            f"finding; killed. A kernel that never ends does this; else allow more time with "
            f"{TIMEOUT_ENV}=SECONDS" + (f"\nlast output:\n{tail}" if tail else "")),
            w.seconds, timed_out=True)
    if w.how == "finding":
        return SanitizerRun(name, True, _trim(
            f"{w.first}\n[the first report; compute-sanitizer --tool {name} was stopped "
            f"there, {w.seconds:.1f} s after its start: one finding rejects the candidate]"),
            w.seconds)
    report = "\n".join(ln for ln in w.output.splitlines() if ln.strip())
    if w.returncode == FOUND_EXIT:
        return SanitizerRun(name, True, _trim(report), w.seconds)
    if w.returncode != 0:  # the child itself failed: a crash under the tool is a finding
        crashed = "Program hit" in report or "ERROR SUMMARY" in report
        return SanitizerRun(name, crashed, _trim(report), w.seconds, available=crashed)
    return SanitizerRun(name, False, "", w.seconds)


def _trim(text: str, limit: int = 6000) -> str:
    return text if len(text) <= limit else text[:limit] + "\n[... report truncated]"
