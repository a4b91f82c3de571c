"""Supervised evaluation (issue 29): a candidate that segfaults, aborts or never ends costs that
candidate only -- RUNTIME_FAILED or TIMEOUT with its cause, the worker replaced, the next
evaluation fine. Real kernels, real host compiler, real worker processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernforge import Kernel
from kernforge.core import Recording, Status
from kernforge.record import find_recordings, load_recording, record
from kernforge.replay import evaluate_variant
from kernforge.replay.isolate import Isolation, Limits

ROOT = Path(__file__).resolve().parents[2]
CODE = r"""
void twice(const double *x, double *y, long n) {
    #pragma omp parallel for
    for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
"""
ENTRY = "    #pragma omp parallel for"
CRASHES = {
    "segfault": "    *(volatile double *)0 = 1.0;\n",
    "abort": "    extern void abort(void); abort();\n",
    "hang": "    for (volatile int spin = 0; spin >= 0; spin += 0) {}\n",
}


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    where = tmp_path_factory.mktemp("isolate") / "rec"
    k = Kernel(CODE, "twice", backend="cpu")
    x, y = np.arange(4096, dtype=np.float64), np.zeros(4096)
    with record(where, kernels="twice"):
        k(x, y, np.int64(4096))
    return load_recording(find_recordings(where)[0])


def _candidate(rec: Recording, what: str):
    code = CODE.replace(ENTRY, CRASHES[what] + ENTRY)
    return rec.variant.with_(source=rec.source.with_code(code))


@pytest.mark.slow
def test_crashes_and_a_hang_cost_that_candidate_only(rec: Recording) -> None:
    with Isolation(limits=Limits(min_timeout_s=2.0)) as iso:
        first = evaluate_variant(rec, rec.variant, repeat=3, isolate=iso)
        assert first.status is Status.OK  # the baseline: the run limit is learned from it
        seen = {}
        for what in CRASHES:
            seen[what] = evaluate_variant(rec, _candidate(rec, what), repeat=3, isolate=iso)
        after = evaluate_variant(rec, rec.variant, repeat=3, isolate=iso)
        assert iso.replaced == 3
    seg, abort, hang = seen["segfault"], seen["abort"], seen["hang"]
    assert seg.status is Status.RUNTIME_FAILED and dict(seg.extra)["cause"] == "SIGSEGV"
    assert "killed by SIGSEGV" in seg.message and "hint:" in seg.message
    assert abort.status is Status.RUNTIME_FAILED and dict(abort.extra)["cause"] == "SIGABRT"
    assert hang.status is Status.TIMEOUT and "run stage" in hang.message
    assert dict(hang.extra)["reason"] == "timeout"
    assert "Traceback" not in seg.message + abort.message + hang.message
    assert after.status is Status.OK and after.samples  # a fresh worker, the run goes on


def test_in_process_and_isolated_agree_on_an_honest_candidate(rec: Recording) -> None:
    inproc = evaluate_variant(rec, rec.variant, repeat=2)
    with Isolation() as iso:
        isolated = evaluate_variant(rec, rec.variant, repeat=2, isolate=iso)
    assert inproc.status is isolated.status is Status.OK
    assert [c.passed for c in inproc.checks] == [c.passed for c in isolated.checks]
    assert dict(isolated.stages)["compile"] >= 0 and len(isolated.samples) == 2


@pytest.mark.slow
def test_cli_replay_of_a_segfaulting_define_exits_6(tmp_path: Path) -> None:
    out = tmp_path / "r"
    rec = subprocess.run([sys.executable, "-m", "kernforge", "record", "-o", str(out), "--",
                          sys.executable, str(ROOT / "examples" / "heat3d_cpu.py"), "--n", "16",
                          "--steps", "1"], check=False, capture_output=True, text=True, cwd=ROOT)
    assert rec.returncode == 0, rec.stderr
    unit = next(p for p in find_recordings(out) if "heat_step" in p.name)
    r = subprocess.run([sys.executable, "-m", "kernforge", "replay", str(unit), "--define",
                        "CENTER_WEIGHT=(*(volatile double*)0)", "--repeat", "2"],
                       check=False, capture_output=True, text=True, cwd=ROOT)
    said = r.stdout + r.stderr
    assert r.returncode == 6, said
    assert "RUNTIME_FAILED" in said and "SIGSEGV" in said and "hint:" in said
    assert "Traceback" not in said


@pytest.mark.slow
def test_a_killed_worker_leaves_no_temporary_files(rec: Recording, tmp_path: Path) -> None:
    """Issue 43 item 8: Ctrl-C left /tmp/kernforge-tsan-* behind: a worker killed before its
    own cleanup (a hang, an interrupt) kept what it had made in the temporary directory. Each
    worker's TMPDIR is now a folder of the pool, removed with the worker."""
    import tempfile
    import uuid

    token = f"kernforge-leak-{uuid.uuid4().hex[:12]}-"
    make = (f'    {{ extern char *getenv(const char *); extern char *mkdtemp(char *);\n'
            f'      extern int snprintf(char *, unsigned long, const char *, ...);\n'
            f'      char t[4096]; const char *d = getenv("TMPDIR");\n'
            f'      snprintf(t, sizeof t, "%s/{token}XXXXXX", d ? d : "/tmp"); mkdtemp(t); }}\n')
    code = CODE.replace(ENTRY, make + CRASHES["hang"] + ENTRY)
    leaky = rec.variant.with_(source=rec.source.with_code(code))
    with Isolation(limits=Limits(min_timeout_s=2.0)) as iso:
        pool = iso._dir
        assert evaluate_variant(rec, rec.variant, repeat=3, isolate=iso).status is Status.OK
        m = evaluate_variant(rec, leaky, repeat=3, isolate=iso)
        assert m.status is Status.TIMEOUT  # killed mid-run, its temporary folder made
    left = [p for root in (Path(tempfile.gettempdir()), Path("/tmp"), pool)
            if root.is_dir() for p in root.rglob(f"{token}*")]
    assert not left, left
