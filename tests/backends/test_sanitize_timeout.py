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
# the stand-in records its pid and runs PYTHON -m MODULE REQUEST as a child. FAKE_TOOL_SAY: the
# tool that prints FAKE_TOOL_LINES first (block-buffered into a pipe, line-buffered into a
# terminal, as a C program's stdio); FAKE_TOOL_THEN: what it does after the child:
# "flood" (a hazard report per line, for ever), "sleep" (120 s), or exit with FAKE_TOOL_EXIT
TOOL = """#!{python}
import os, subprocess, sys, time
args = sys.argv[1:]
start = args.index("-m") - 1
open(os.environ["FAKE_TOOL_PIDS"], "a").write(f"{{os.getpid()}}\\n")
once = os.environ.get("FAKE_TOOL_FAIL_ONCE", "")  # a tool that cannot start the first time
if once and args[1] == once and not os.path.exists(os.environ["FAKE_TOOL_PIDS"] + ".failed"):
    open(os.environ["FAKE_TOOL_PIDS"] + ".failed", "w").close()
    sys.exit(3)
say = os.environ.get("FAKE_TOOL_SAY") == args[1]
out = os.fdopen(os.dup(1), "w", buffering=1 if os.isatty(1) else 65536)  # as C's stdio
if say:
    print(os.environ["FAKE_TOOL_LINES"], file=out)
code = subprocess.call(args[start:])
then = os.environ.get("FAKE_TOOL_THEN", "") if say else ""
if then == "flood":
    while True:
        print("========= Error: Potential RAW hazard detected at __shared__ 0x4 in block "
              "(9,0,0) :", file=out)
if then == "sleep":
    time.sleep(120)
out.flush()
sys.exit(int(os.environ.get("FAKE_TOOL_EXIT", code)) if say else code)
"""
HAZARD = """========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0x84 in block (0,0,0) :
=========     Write Thread (33,0,0) at saxpy+0x90
=========     Read Thread (0,0,0) at saxpy+0xb0
=========     Current Value : 0"""


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


@pytest.mark.slow
def test_the_four_tools_run_at_once_and_one_that_could_not_start_runs_again(
        tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TOOL_FAIL_ONCE", "initcheck")
    runs = run_tools("cpu", _variant(CODE), [np.zeros(8), 8])
    assert [(r.tool, r.finding, r.available) for r in runs] == [
        (t, False, True) for t in TOOLS], runs
    assert len(tool.read_text().split()) == len(TOOLS) + 1  # initcheck twice
    monkeypatch.setenv(PARALLEL_ENV, "0")
    assert not any(r.finding for r in run_tools("cpu", _variant(CODE), [np.zeros(8), 8]))


@pytest.mark.slow
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


def _gone(pids: Path) -> None:
    time.sleep(0.5)
    for pid in pids.read_text().split():  # the stand-in (and so its child's group) is gone
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)


@pytest.mark.slow
@pytest.mark.parametrize("then", ["flood", "sleep"])
def test_the_first_hazard_stops_the_run(tool: Path, monkeypatch: pytest.MonkeyPatch,
                                        then: str) -> None:
    """A racy kernel on a large grid: racecheck reports a hazard in every block, for minutes
    ("flood"), or its reports sit in its buffer while it works on ("sleep": unflushed output,
    seen only through the terminal the watcher gives it). The first report is enough: the run
    stops seconds after it, a finding (not a timeout) with that report."""
    monkeypatch.setenv(TIMEOUT_ENV, "60")
    monkeypatch.setenv("FAKE_TOOL_SAY", "racecheck")
    monkeypatch.setenv("FAKE_TOOL_LINES", HAZARD)
    monkeypatch.setenv("FAKE_TOOL_THEN", then)
    t0 = time.monotonic()
    (r,) = run_tools("cpu", _variant(CODE), [np.zeros(8), 8], tools=("racecheck",))
    assert time.monotonic() - t0 < 30, r
    assert r.finding and r.available and not r.timed_out, r
    assert r.report.startswith("========= Error: Potential RAW hazard detected"), r.report
    assert "Write Thread (33,0,0)" in r.report and "[the first report;" in r.report
    assert len(r.report) < 7000
    _gone(tool)


def test_a_finding_left_to_the_exit_status(tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A racecheck warning does not stop the run early; the tool's exit status decides (86: a
    finding, with the whole report), and clean summaries are no finding."""
    monkeypatch.setenv("FAKE_TOOL_SAY", "racecheck")
    warning = HAZARD.replace("Error: Potential", "Warning: Potential")
    monkeypatch.setenv("FAKE_TOOL_LINES", warning)
    monkeypatch.setenv("FAKE_TOOL_EXIT", "86")
    (r,) = run_tools("cpu", _variant(CODE), [np.zeros(8), 8], tools=("racecheck",))
    assert r.finding and not r.timed_out and "Warning: Potential RAW" in r.report, r
    assert "[the first report;" not in r.report
    monkeypatch.setenv("FAKE_TOOL_LINES", "========= COMPUTE-SANITIZER\n========= RACECHECK "
                       "SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")
    monkeypatch.setenv("FAKE_TOOL_EXIT", "0")
    (r,) = run_tools("cpu", _variant(CODE), [np.zeros(8), 8], tools=("racecheck",))
    assert not r.finding and not r.timed_out, r


@pytest.mark.parametrize(("line", "first"), [
    ("========= Error: Potential WAW hazard detected at __shared__ 0x0 in block (0,0,0) :", True),
    ("========= ERROR: Potential RAW hazard detected at __shared__ 0x0 in block (1,0,0) :", True),
    ("========= Error: Race reported between Write access at saxpy+0x90", True),
    ("========= Invalid __global__ read of size 4 bytes", True),
    ("========= Uninitialized __global__ memory read of size 4 bytes", True),
    ("========= Barrier error detected. Divergent thread(s) in warp", True),
    ("========= WARNING: Race reported between Write access at RAW()+0xf0", False),
    ("========= Warning: Potential RAW hazard detected at __shared__ 0x0 in block (0,0,0) :",
     False),
    ("========= COMPUTE-SANITIZER", False),
    ("========= ERROR SUMMARY: 0 errors", False),
    ("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)", False),
    ("Invalid __global__ read of size 4 bytes", False),  # not the tool's line
])
def test_which_lines_open_a_finding(line: str, first: bool) -> None:
    from kernforge.backends.sanitize_cuda import FIRST_FINDING

    assert bool(FIRST_FINDING.search(line)) is first


def test_a_finding_decides_before_another_tools_timeout(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from kernforge.backends import SanitizerRun, get_backend
    from kernforge.core import Status
    from kernforge.replay.validate import validate
    from kernforge.testing.redteam import record_bases
    from kernforge.testing.redteam_c import BASES

    rec = record_bases(tmp_path, [b for b in BASES if b.name == "saxpy"], "cpu")["saxpy"]
    be = get_backend("cpu")
    runs = [SanitizerRun("asan", True, "did not finish within 3 s", 3.0, timed_out=True),
            SanitizerRun("tsan", True, "WARNING: ThreadSanitizer: data race", 1.0)]
    monkeypatch.setattr(type(be), "sanitize", lambda self, compiled, args: runs)
    v = validate(rec, rec.variant, passes=1, per_pass=1, warmup=0)
    assert (v.verdict, v.status, v.reason) == ("rejected", Status.WRONG_RESULT, "sanitizer:race")
