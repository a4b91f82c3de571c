"""The measured host overhead of a deployment (deploy/overhead.py, benchmarks/bench_deploy_overhead.py)
and the rule built on it (deploy/worth.py): a winner that saves less per launch than a
replaced launch costs is not deployed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deploy_helpers import axpy_entry, record_axpy

from kernforge.backends import Kernel, add_observer, remove_observer
from kernforge.core import BackendUnavailableError, ConfigError
from kernforge.deploy import entry_from_event, entry_from_recording, measure_overhead
from kernforge.deploy.overhead import MISMATCH, MISSING, PLAIN, REPLACED, VARIED
from kernforge.deploy.worth import not_worth, saving_s, worth_deploying
from kernforge.record import load_recording, record

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_deploy_overhead.py"
HAS_CUPY = importlib.util.find_spec("cupy") is not None


def test_cpu_measurement_has_every_mode() -> None:
    table = measure_overhead("cpu", launches=40, batches=2)
    assert list(table.times) == [PLAIN, MISSING, REPLACED, MISMATCH, VARIED]
    assert all(len(ts) == 2 and all(0 < t < 0.01 for t in ts) for ts in table.times.values())
    assert table.per_launch_s == table.overhead(REPLACED)
    assert table.overhead(REPLACED) == pytest.approx(
        float(np.median([r - p for r, p in zip(table.times[REPLACED], table.times[PLAIN])])))
    lines = table.lines()
    assert lines[0].startswith("host time per launch, cpu backend") and len(lines) == 6
    assert "overhead" not in lines[1] and all("overhead" in ln for ln in lines[2:])
    doc = table.to_json()
    assert set(doc["overhead_s"]) == {MISSING, REPLACED, MISMATCH, VARIED}
    json.dumps(doc)


@pytest.mark.skipif(HAS_CUPY, reason="CuPy is installed: the GPU path is measured instead")
def test_cuda_measurement_without_cupy_says_what_is_missing() -> None:
    with pytest.raises(BackendUnavailableError, match="needs CuPy and an NVIDIA GPU") as err:
        measure_overhead("cuda", launches=1, batches=1)
    assert "--backend cpu" in str(err.value.hint)


def test_measurement_refuses_what_it_cannot_measure() -> None:
    with pytest.raises(ConfigError, match="no overhead measurement for backend"):
        measure_overhead("null")
    with pytest.raises(ConfigError, match="at least 1"):
        measure_overhead("cpu", launches=0)

    class Watcher:
        def before(self, event: Any) -> None: ...

        def after(self, token: Any, error: Any) -> None: ...

    w = Watcher()
    add_observer(w)
    try:
        with pytest.raises(ConfigError, match="observers are registered"):
            measure_overhead("cpu")
    finally:
        remove_observer(w)


def test_bench_script_cpu_and_cuda(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    r = subprocess.run([sys.executable, str(BENCH), "--launches", "20", "--batches", "1",
                        "--json", str(out)], capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stderr
    assert "replaced" in r.stdout and json.loads(out.read_text())["backend"] == "cpu"
    if HAS_CUPY:
        return
    r = subprocess.run([sys.executable, str(BENCH), "--backend", "cuda"], capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert "needs CuPy and an NVIDIA GPU" in r.stderr and "hint:" in r.stderr


def test_entry_from_event_equals_entry_from_recording(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Capture:
        def before(self, event: Any) -> None:
            seen.append(event)

        def after(self, token: Any, error: Any) -> None: ...

    k = Kernel("void s(const double *x, double *y, double a, int n, short m) "
               "{ for (int i = 0; i < n; i++) y[i] = a * x[i] + m; }", "s", backend="cpu")
    c = Capture()
    add_observer(c)
    try:
        with record(tmp_path / "rec") as rec:
            k(np.arange(5.0), np.zeros(5), 1.5, 5, 3)
    finally:
        remove_observer(c)
    r = load_recording(rec.paths[0])
    tuned = r.variant.with_(options={"opt_level": "O3"}, constants={"a": 1.5})
    kw: dict[str, Any] = {"baseline_s": 2.0, "tuned_s": 1.0, "speedup": 2.0,
                          "speedup_ci": None}
    a, b = entry_from_recording(r, tuned, **kw), entry_from_event(seen[0], tuned, **kw)
    assert a.match_key() == b.match_key()
    assert (a.kernel, a.problem, a.variant) == (b.kernel, b.problem, b.variant)
    assert [p.value for p in b.problem.args] == [None, None, 1.5, 5, 3]


def test_a_winner_must_save_more_than_the_overhead(tmp_path: Path) -> None:
    e = axpy_entry(record_axpy(tmp_path / "rec"))  # 2 ms -> 1 ms
    assert saving_s(e) == pytest.approx(1e-3)
    assert not_worth("axpy", 2e-3, 1e-3, 0.5e-3) is None
    assert not_worth("axpy", 2e-3, 1e-3, -5e-6) is None  # a negative overhead counts as 0
    why = not_worth("axpy", 61.3e-6, 60.68e-6, 14.1e-6)
    assert why == ("axpy: saves 0.62 us per launch (61.30 us -> 60.68 us in replay), not "
                   "more than the 14.10 us a replaced launch costs the host: not deployed")
    assert not_worth("axpy", 3e-6, 3e-6, -1e-6) is not None  # no saving is never worth it
    assert not_worth("axpy", 0.75, 0.5, 0.25) is not None  # saving == overhead: no gain
    small = replace(e, evidence=replace(e.evidence, baseline_s=20e-6, tuned_s=19.9e-6,
                                        speedup=20 / 19.9))
    kept, dropped = worth_deploying([small, e], overhead_s=10e-6)
    assert kept == [e] and [d.entry for d in dropped] == [small]
    assert dropped[0].reason.startswith("axpy: saves 0.10 us per launch")
    # noisy medians that disagree with their median ratio: the saving follows the ratio
    noisy = replace(e, evidence=replace(e.evidence, baseline_s=1e-3, tuned_s=1.3e-3,
                                        speedup=1.25))
    assert saving_s(noisy) == pytest.approx(0.2e-3)


def test_a_winner_whose_verdict_is_not_faster_is_never_worth_it(tmp_path: Path) -> None:
    """Issue 43: deploy decisions use the one speed verdict. Evidence whose interval straddles
    the noise band (inconclusive), lies below it (not faster) or was measured on a busy device
    is not deployed, however much its medians save; the reason is the verdict's."""
    e = axpy_entry(record_axpy(tmp_path / "rec"))  # 2 ms -> 1 ms, saves far more than 10 us
    wide = replace(e, evidence=replace(e.evidence, speedup=2.0, speedup_ci=(0.9, 1.3)))
    flat = replace(e, evidence=replace(e.evidence, speedup=1.01, speedup_ci=(1.0, 1.015)))
    busy = replace(e, evidence=replace(e.evidence, speedup=2.0, speedup_ci=(1.9, 2.1),
                                       idle=False))
    sure = replace(e, evidence=replace(e.evidence, speedup=2.0, speedup_ci=(1.9, 2.1)))
    kept, dropped = worth_deploying([wide, flat, busy, sure], overhead_s=10e-6)
    assert kept == [sure]
    reasons = [d.reason for d in dropped]
    assert reasons[0].startswith("axpy: inconclusive: 2.000x [CI 0.900, 1.300]")
    assert "measure again" in reasons[0] and "slower" not in reasons[0]
    assert reasons[1].startswith("axpy: not faster: 1.010x")
    assert reasons[2].startswith("axpy: inconclusive: the device was busy")
    assert all(r.endswith(": not deployed") for r in reasons)


def test_a_device_bound_winner_is_deployed_even_below_the_overhead() -> None:
    """The second rule: a tuned kernel longer than the host needs to issue a replaced launch
    (plain issue + overhead) hides the overhead behind its own device time."""
    # the H200 demo's z-marched stencil: 71.4 -> 53.6 us, overhead 23.2 us, plain issue 5.3 us
    assert not_worth("heat_stencil", 71.39e-6, 53.63e-6, 23.17e-6, 5.3e-6) is None
    assert not_worth("heat_stencil", 71.39e-6, 53.63e-6, 23.17e-6) is not None  # issue unknown
    # a short kernel: 14.37 -> 14.02 us does not cover 5.3 + 11.1 us of host time
    why = not_worth("apply_boundary", 14.37e-6, 14.02e-6, 11.1e-6, 5.3e-6)
    assert why == ("apply_boundary: saves 0.35 us per launch (14.37 us -> 14.02 us in replay), "
                   "not more than the 11.10 us a replaced launch costs the host, and the kernel "
                   "is shorter than the 16.40 us the host needs to issue a replaced launch: "
                   "not deployed")
    assert not_worth("k", 60e-6, 60e-6, 1e-6, 1e-6) is not None  # long, but saves nothing
    assert not_worth("k", 60e-6, 61e-6, 1e-6, 1e-6) is not None  # slower
    assert not_worth("k", 20e-6, 16.6e-6, 12e-6, 4.5e-6) is None  # 16.6 > 4.5 + 12
    assert not_worth("k", 20e-6, 16.4e-6, 12e-6, 4.5e-6) is not None  # 16.4 < 16.5: exposed
