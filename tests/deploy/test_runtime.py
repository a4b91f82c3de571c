"""deploy.use on kernforge.Kernel launches: matching, fallbacks, logging, the report."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import axpy_entry, axpy_kernel, record_axpy, refuse_tuned_axpy

from kernforge import deploy
from kernforge.backends import Kernel, events
from kernforge.deploy import DeploySpec, write_spec

X = np.arange(4.0)


@pytest.fixture(autouse=True)
def _no_deployment_left() -> Iterator[None]:
    yield
    deploy.stop()
    assert events.substituter() is None and not events.active()


def run_axpy(kernel: Kernel, n: int = 4, a: float = 2.0) -> np.ndarray:
    y = np.ones(n)
    kernel(np.arange(float(n)), y, a, n)
    return y


def test_matching_launch_runs_the_tuned_variant(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    spec = write_spec(tmp_path / "d.json", [axpy_entry(rec)])
    k = axpy_kernel()
    plain = run_axpy(k)
    with deploy.use(spec) as dep:
        tuned = run_axpy(k)  # BIAS=100 in the tuned variant: visible in the output
        assert events.active()
    np.testing.assert_array_equal(tuned, plain + 100)
    np.testing.assert_array_equal(run_axpy(k), plain)  # stopped: the original again
    r = dep.report()
    assert r.kernels["axpy"].replaced == 1 and r.fallback == 0
    assert deploy.report().to_json()["replaced"] == 1


def test_other_problem_runs_the_original(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    k = axpy_kernel()
    with deploy.use(DeploySpec((axpy_entry(rec),))):
        np.testing.assert_array_equal(run_axpy(k, n=5), 2.0 * np.arange(5.0) + 1)  # shape
        y = np.ones(4)
        k(X, y, 2.0, 3)  # same shapes, another integer scalar
        np.testing.assert_array_equal(y, [1, 3, 5, 1])
        np.testing.assert_array_equal(run_axpy(k, a=3.0), 3.0 * X + 101)  # floats: any value
    counts = deploy.report().kernels["axpy"]
    assert (counts.replaced, counts.fallback) == (1, 2)
    assert counts.reasons == {"problem mismatch": 2}


def test_constants_are_part_of_the_problem(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    with deploy.use(DeploySpec((axpy_entry(rec, constants={"a": 2.0}),))):
        run_axpy(axpy_kernel(), a=3.0)
        run_axpy(axpy_kernel(), a=2.0)
    counts = deploy.report().kernels["axpy"]
    assert (counts.replaced, counts.fallback) == (1, 1)


def test_other_device_runs_the_original(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                        ) -> None:
    rec = record_axpy(tmp_path / "rec")
    entry = replace(axpy_entry(rec), device={"device": "another host"})
    caplog.set_level(logging.INFO, logger="kernforge.deploy")
    with deploy.use(DeploySpec((entry,))):
        for _ in range(3):
            np.testing.assert_array_equal(run_axpy(axpy_kernel()), 2.0 * X + 1)
    assert deploy.report().kernels["axpy"].reasons == {"device mismatch": 3}
    logged = [r.getMessage() for r in caplog.records if "device mismatch" in r.getMessage()]
    assert len(logged) == 1 and "another host" in logged[0]  # once per kernel and reason


def test_kernel_built_differently_runs_the_original(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    with deploy.use(DeploySpec((axpy_entry(rec),))):
        np.testing.assert_array_equal(run_axpy(axpy_kernel(bias=5)), 2.0 * X + 6)
        other = Kernel(rec.source.code.replace("+ BIAS", "+ 1 * BIAS"), "axpy", backend="null",
                       defines={"BIAS": 0})
        run_axpy(other)
    r = deploy.report().kernels["axpy"]
    assert r.reasons == {"build mismatch": 1, "not in the spec": 1}


def test_tuned_variant_that_does_not_compile_falls_back(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rec = record_axpy(tmp_path / "rec")
    broken = rec.source.with_code(rec.source.code + "\ndef oops(:\n")
    with deploy.use(DeploySpec((axpy_entry(rec, source=broken),))):
        for _ in range(2):
            np.testing.assert_array_equal(run_axpy(axpy_kernel()), 2.0 * X + 1)
    assert deploy.report().kernels["axpy"].reasons == {"compile failure": 2}
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "compile failure" in warned[0].getMessage()


def test_tuned_variant_that_does_not_launch_falls_back(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    code = rec.source.code.replace('n: "int")', 'n: "int", m: "int")')
    with deploy.use(DeploySpec((axpy_entry(rec, source=rec.source.with_code(code)),))):
        for _ in range(2):
            np.testing.assert_array_equal(run_axpy(axpy_kernel()), 2.0 * X + 1)
    assert deploy.report().kernels["axpy"].reasons == {"launch failure": 2}


def test_observers_see_what_ran(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    seen: list[dict[str, str]] = []

    class Spy:
        def before(self, event: events.LaunchEvent) -> None:
            seen.append(dict(event.variant.defines))

        def after(self, token: object, error: BaseException | None) -> None:
            pass

    spy = Spy()
    events.add_observer(spy)
    try:
        with deploy.use(DeploySpec((axpy_entry(rec),))):
            run_axpy(axpy_kernel())
        run_axpy(axpy_kernel())
    finally:
        events.remove_observer(spy)
    assert seen == [{"BIAS": "100"}, {"BIAS": "0"}]


def test_use_replaces_the_active_deployment(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    first = deploy.use(DeploySpec((axpy_entry(rec),)))
    second = deploy.use(DeploySpec(()))
    assert deploy.current() is second and events.substituter() is second
    run_axpy(axpy_kernel())
    assert first.report().replaced == 0
    assert second.report().kernels["axpy"].reasons == {"not in the spec": 1}
    assert deploy.stop() is not None and deploy.stop() is None


def test_cpu_heat_step_identical_output(tmp_path: Path) -> None:
    """A real C kernel (cpu backend) tuned to -O3 -march=native gives bit-identical results."""
    import importlib.util

    spec_ = importlib.util.spec_from_file_location(
        "heat3d_cpu", Path(__file__).resolve().parents[2] / "examples" / "heat3d_cpu.py")
    assert spec_ is not None and spec_.loader is not None
    app = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(app)
    from kernforge.record import load_recording, record

    with record(tmp_path / "rec", kernels="heat_step", max_instances=1) as rec:
        plain = app.run(n=20, steps=4, diag_every=0, quiet=True)
    r = load_recording(rec.paths[0])
    variant = r.variant.with_(options={"opt_level": "O3", "march": "native"})
    entry = deploy.entry_from_recording(r, variant, baseline_s=2.0, tuned_s=1.0, speedup=2.0,
                                        speedup_ci=None)
    with deploy.use(DeploySpec((entry,))):
        tuned = app.run(n=20, steps=4, diag_every=0, quiet=True)
    assert np.array_equal(plain, tuned)
    counts = deploy.report().kernels
    assert counts["heat_step"].replaced == 4 and counts["apply_boundary"].replaced == 0


SHIFT = r"""
#ifndef BIAS
#define BIAS 0
#endif
void shift(const double *restrict x, double *restrict y, long n) {
    for (long i = 1; i < n; i++) y[i] = x[i - 1] + BIAS;
}
"""


def test_aliased_arguments_run_the_original(tmp_path: Path) -> None:
    """A variant tuned (and verified) on the recording's distinct buffers is not applied to an
    in-place call k(a, a): restrict-qualified code would compute something else."""
    from kernforge.record import load_recording, record

    k = Kernel(SHIFT, "shift", backend="cpu")
    with record(tmp_path / "rec") as rec:
        k(np.arange(8.0), np.zeros(8), 8)
    r = load_recording(rec.paths[0])
    entry = deploy.entry_from_recording(r, r.variant.with_(defines={"BIAS": 100}),
                                        baseline_s=2.0, tuned_s=1.0, speedup=2.0,
                                        speedup_ci=None)
    assert entry.problem.aliases == ()
    spec = write_spec(tmp_path / "d.json", [entry])
    assert deploy.read_spec(spec).entries[0].problem.aliases == ()
    a = np.arange(8.0)
    expected = a.copy()
    k(expected, expected, 8)  # the original, in place
    with deploy.use(spec):
        k(a, a, 8)
        x, y = np.arange(8.0), np.zeros(8)
        k(x, y, 8)  # distinct buffers: the tuned variant
        b = np.arange(16.0)
        k(b[:8], b[4:12], 8)  # overlapping views of one buffer: the original
    np.testing.assert_array_equal(a, expected)
    np.testing.assert_array_equal(y[1:], np.arange(7.0) + 100)
    counts = deploy.report().kernels["shift"]
    assert (counts.replaced, counts.fallback) == (1, 2)
    assert counts.reasons == {"aliasing": 2}


def test_overlap_of_strided_and_disjoint_views() -> None:
    from kernforge.deploy.match import overlapping

    a = np.arange(16.0)
    assert overlapping([("x", a[:8]), ("y", a[8:])]) == ()
    assert overlapping([("x", a[:9]), ("y", a[8:])]) == (("x", "y"),)
    assert overlapping([("x", a[::-1]), ("y", a[3:4]), ("z", np.zeros(2))]) == (("x", "y"),)
    assert overlapping([("x", a[:0]), ("y", a)]) == ()


def test_tuned_launch_raising_any_exception_falls_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A tuned launch that raises something kernforge did not wrap (a driver binding's own
    error, a bug) never reaches the application: the original runs, the report says so."""
    refused = refuse_tuned_axpy(monkeypatch, "driver exploded")
    rec = record_axpy(tmp_path / "rec")
    with deploy.use(DeploySpec((axpy_entry(rec),))):
        for _ in range(2):
            np.testing.assert_array_equal(run_axpy(axpy_kernel()), 2.0 * X + 1)
    counts = deploy.report().kernels["axpy"]
    assert (counts.replaced, counts.fallback) == (0, 2)
    assert counts.reasons == {"launch failure": 2} and refused
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "RuntimeError: driver exploded" in warned[0]


def test_failure_preparing_the_tuned_launch_falls_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernforge.deploy import decide

    def broken(*_: object) -> None:
        raise ValueError("bug")

    monkeypatch.setattr(decide, "tuned_launch", broken)
    rec = record_axpy(tmp_path / "rec")
    with deploy.use(DeploySpec((axpy_entry(rec),))):
        np.testing.assert_array_equal(run_axpy(axpy_kernel()), 2.0 * X + 1)
    assert deploy.report().kernels["axpy"].reasons == {"internal error": 1}


def test_environment_activation_never_breaks_the_import(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import sys

    from kernforge.deploy import runtime

    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("unexpected")

    monkeypatch.setenv(runtime.ENV_VAR, str(tmp_path / "d.json"))
    monkeypatch.setattr(runtime, "use", broken)
    with pytest.warns(RuntimeWarning, match="not deployed: RuntimeError: unexpected"):
        assert runtime.use_from_environment() is None
    # a deploy package that cannot even be imported: kernforge still imports, with a warning
    code = ("import sys, types; sys.modules['kernforge.deploy.runtime'] = "
            "types.ModuleType('kernforge.deploy.runtime'); import kernforge; print('ran')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0 and r.stdout.strip() == "ran", r.stderr
    assert "not deployed" in r.stderr
