"""Each sanitizer run has a time limit (``KERNFORGE_SANITIZER_TIMEOUT_S``): past it the tool and
the process it watches are killed and the run is a ``timed_out`` finding, which the gate turns
into ``sanitizer:timeout`` (Status TIMEOUT). A stand-in for compute-sanitizer runs the child
as the real tool would (CPU backend), so the subprocess handling is tested here."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends.sanitize import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, timeout_s
from kernforge.backends.sanitize_cuda import PARALLEL_ENV, TOOLS, run_tools
from kernforge.core import ConfigError, KernelSource, LaunchConfig, Variant
from kernforge.harness.integrity import REASONS

CODE = r"""
void fill(double *y, long n) {
    for (long i = 0; i < n; i++) y[i] = (double)i;
}
"""
HANG = CODE.replace("y[i] = (double)i;", "y[i] = (double)i; while (*(volatile double *)y == 0) { }")
# compute-sanitizer's command line: ... --kernel-name kns=ENTRY [extra] PYTHON -m MODULE REQUEST;
# the stand-in records its pid and runs PYTHON -m MODULE REQUEST as a child
TOOL = """#!{python}
import os, subprocess, sys
args = sys.argv[1:]
start = args.index("-m") - 1
open(os.environ["FAKE_TOOL_PIDS"], "a").write(f"{{os.getpid()}}\\n")
once = os.environ.get("FAKE_TOOL_FAIL_ONCE", "")  # a tool that cannot start the first time
if once and args[1] == once and not os.path.exists(os.environ["FAKE_TOOL_PIDS"] + ".failed"):
    open(os.environ["FAKE_TOOL_PIDS"] + ".failed", "w").close()
    sys.exit(3)
sys.exit(subprocess.call(args[start:]))
"""


def _variant(code: str) -> Variant:
    return Variant(KernelSource(code, "fill", "c"), launch=LaunchConfig(threads=1))


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "compute-sanitizer"
    path.write_text(TOOL.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv("KERNFORGE_COMPUTE_SANITIZER", str(path))
    monkeypatch.setenv("FAKE_TOOL_PIDS", str(tmp_path / "pids"))
    return tmp_path / "pids"


def test_a_clean_run_under_the_stand_in(tool: Path) -> None:
    runs = run_tools("cpu", _variant(CODE), [np.zeros(8), 8], tools=("memcheck",))
    assert [(r.tool, r.finding, r.timed_out, r.available) for r in runs] == [
        ("memcheck", False, False, True)], runs


def test_the_four_tools_run_at_once_and_one_that_could_not_start_runs_again(
        tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TOOL_FAIL_ONCE", "initcheck")
    runs = run_tools("cpu", _variant(CODE), [np.zeros(8), 8])
    assert [(r.tool, r.finding, r.available) for r in runs] == [
        (t, False, True) for t in TOOLS], runs
    assert len(tool.read_text().split()) == len(TOOLS) + 1  # initcheck twice
    monkeypatch.setenv(PARALLEL_ENV, "0")
    assert not any(r.finding for r in run_tools("cpu", _variant(CODE), [np.zeros(8), 8]))


def test_a_run_past_the_limit_is_killed_with_its_child(tool: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "3")
    t0 = time.monotonic()
    runs = run_tools("cpu", _variant(HANG), [np.zeros(8), 8], tools=("racecheck",))
    assert time.monotonic() - t0 < 60
    (r,) = runs
    assert r.finding and r.timed_out and r.available, r
    assert "did not finish within 3 s" in r.report and TIMEOUT_ENV in r.report
    time.sleep(0.5)
    for pid in tool.read_text().split():  # the stand-in (and so its child's group) is gone
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)
    assert "sanitizer:timeout" in REASONS


def test_the_limit_is_validated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIMEOUT_ENV, raising=False)
    assert timeout_s() == DEFAULT_TIMEOUT_S
    monkeypatch.setenv(TIMEOUT_ENV, "12.5")
    assert timeout_s() == 12.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv(TIMEOUT_ENV, bad)
        with pytest.raises(ConfigError, match=TIMEOUT_ENV):
            timeout_s()


def test_the_gate_rejects_a_timed_out_run_as_a_timeout(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    from kernforge.backends import SanitizerRun, get_backend
    from kernforge.core import Status
    from kernforge.replay.validate import validate
    from kernforge.testing.redteam import record_bases
    from kernforge.testing.redteam_c import BASES

    rec = record_bases(tmp_path, [b for b in BASES if b.name == "saxpy"], "cpu")["saxpy"]
    be = get_backend("cpu")
    late = SanitizerRun("tsan", True, "did not finish within 3 s", 3.0, timed_out=True)
    monkeypatch.setattr(type(be), "sanitize", lambda self, compiled, args: [late])
    v = validate(rec, rec.variant, passes=1, per_pass=1, warmup=0)
    assert (v.verdict, v.status, v.reason) == ("rejected", Status.TIMEOUT, "sanitizer:timeout")
    assert "did not finish" in v.message
