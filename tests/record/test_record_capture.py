"""record(...) with the null backend: round trip, dedup, filters, no effect on the app."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from record_helpers import AXPY

from kernforge.backends import Kernel
from kernforge.backends import events as events_mod
from kernforge.core import KernelRuntimeError, LaunchConfig, Tolerance
from kernforge.record import find_recordings, load_recording, record


def _heat_args(n: int = 64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u = np.sin(np.linspace(0, 3, n)).astype(np.float32)
    return u, np.zeros(n, np.float32), np.arange(n, dtype=np.int32)


def test_round_trip_every_field(tmp_path: Path, heat: Kernel) -> None:
    u, out, flag = _heat_args()
    u0, out0, flag0 = u.copy(), out.copy(), flag.copy()
    heat.tolerance = {"out": Tolerance.parse("abs:1e-6")}
    with record(tmp_path) as rec:
        heat(u, out, flag, 0.25, 64, grid=(4, 2), block=16, threads=3)
    assert [p.name for p in rec.paths] == ["heat_step-0"]
    assert rec.seen == {"heat_step": 1} and rec.recorded == {"heat_step": 1} and rec.count == 1
    r = load_recording(rec.paths[0], verify=True)
    assert r.path == rec.paths[0] and r.name == "heat_step-0" and r.instance == 0
    assert r.backend == "null" and r.identity == heat.backend.identity()
    assert r.source.code == heat.source.code and r.source.entry == "heat_step"
    assert r.source.language == "python"
    assert r.source.signature == heat.compiled().signature
    assert r.options.as_dict() == {"opt_level": "O0"}  # resolved: the default filled in
    assert r.defines == (("UNUSED", "3"),)
    assert r.launch == LaunchConfig(grid=(4, 2), block=16, threads=3)
    assert r.kernforge_version and r.created.endswith("+00:00")
    assert [(a.name, a.kind, a.dtype, a.shape) for a in r.args] == [
        ("u", "array", "float32", (64,)), ("out", "array", "float32", (64,)),
        ("flag", "array", "int32", (64,)), ("alpha", "scalar", "float32", ()),
        ("n", "scalar", "int32", ())]
    assert r.arg("alpha").value == 0.25 and r.arg("n").value == 64
    assert r.arg("out").policy == Tolerance("abs", atol=1e-6)
    assert r.arg("u").policy == Tolerance()
    np.testing.assert_array_equal(r.prologue("u"), u0)
    np.testing.assert_array_equal(r.prologue("out"), out0)
    np.testing.assert_array_equal(r.prologue("flag"), flag0)
    np.testing.assert_array_equal(r.expected("out"), out)
    np.testing.assert_array_equal(r.expected("u"), u0)
    assert r.arg("out").written and not r.arg("u").written and not r.arg("flag").written
    assert r.nbytes == 64 * 4 * 3
    assert not r.prologue("u").flags.writeable  # memory-mapped read-only


def test_identical_buffers_stored_once(tmp_path: Path, axpy: Kernel) -> None:
    x, y = np.full(32, 3.0), np.full(32, 3.0)  # same contents -> one prologue blob
    with record(tmp_path) as rec:
        axpy(x, y, 0.0, 32)  # y = 0*x + y: unchanged -> epilogue null
    r = load_recording(rec.paths[0])
    assert r.arg("x").prologue == r.arg("y").prologue
    assert r.arg("x").epilogue is None and r.arg("y").epilogue is None
    assert len(list((rec.paths[0] / "blobs").iterdir())) == 1


def test_unchanged_buffers_have_no_epilogue(tmp_path: Path, heat: Kernel) -> None:
    with record(tmp_path) as rec:
        heat(*_heat_args(), 0.1, 64)
    r = load_recording(rec.paths[0])
    assert {a.name: a.epilogue is not None for a in r.args if a.is_array} == {
        "u": False, "out": True, "flag": False}
    assert len(list((rec.paths[0] / "blobs").iterdir())) == 4  # u, out, flag, out after


def test_pattern_filter(tmp_path: Path, axpy: Kernel, heat: Kernel) -> None:
    x, y = np.ones(4), np.ones(4)
    with record(tmp_path, kernels="heat_*") as rec:
        axpy(x, y, 1.0, 4)
        heat(*_heat_args(), 0.1, 64)
    assert [p.name for p in rec.paths] == ["heat_step-0"]
    assert rec.seen == {"heat_step": 1}


def test_max_instances_default_is_4_per_kernel(tmp_path: Path, axpy: Kernel,
                                               heat: Kernel) -> None:
    x, y = np.ones(4), np.ones(4)
    with record(tmp_path) as rec:
        for _ in range(6):
            axpy(x, y, 1.0, 4)
            heat(*_heat_args(), 0.1, 64)
    assert rec.recorded == {"axpy": 4, "heat_step": 4}
    assert rec.seen == {"axpy": 6, "heat_step": 6}
    names = [p.name for p in find_recordings(tmp_path)]
    assert names == [f"axpy-{i}" for i in range(4)] + [f"heat_step-{i}" for i in range(4)]


def test_skip_then_record(tmp_path: Path, axpy: Kernel) -> None:
    x, y = np.ones(4), np.zeros(4)
    with record(tmp_path, skip=3, max_instances=2) as rec:
        for _ in range(10):
            axpy(x, y, 1.0, 4)
    assert [p.name for p in rec.paths] == ["axpy-0", "axpy-1"]
    # calls 3 and 4 (0-based) were recorded: y held 3 and 4 before them
    assert load_recording(rec.paths[0]).prologue("y")[0] == 3.0
    assert load_recording(rec.paths[1]).prologue("y")[0] == 4.0


def test_instances_continue_in_an_existing_root(tmp_path: Path, axpy: Kernel) -> None:
    x, y = np.ones(4), np.ones(4)
    for _ in range(2):
        with record(tmp_path, max_instances=2):
            axpy(x, y, 1.0, 4)
            axpy(x, y, 1.0, 4)
    assert [p.name for p in find_recordings(tmp_path)] == [f"axpy-{i}" for i in range(4)]
    assert [load_recording(p).instance for p in find_recordings(tmp_path)] == [0, 1, 2, 3]


def _simulate(k: Kernel, steps: int) -> np.ndarray:
    u, out, flag = _heat_args(256)
    for _ in range(steps):
        k(u, out, flag, 0.2, 256)
        u, out = out, u
    return u


def test_outputs_identical_with_and_without_recording(tmp_path: Path, heat: Kernel) -> None:
    plain = _simulate(heat, 12)
    with record(tmp_path, max_instances=5, skip=2) as rec:
        recorded = _simulate(heat, 12)
    assert rec.count == 5
    assert plain.tobytes() == recorded.tobytes()


def test_prologue_is_a_copy_not_a_view(tmp_path: Path, axpy: Kernel) -> None:
    x, y = np.arange(4.0), np.zeros(4)
    with record(tmp_path) as rec:
        axpy(x, y, 1.0, 4)
    x[:] = -1
    np.testing.assert_array_equal(load_recording(rec.paths[0]).prologue("x"), np.arange(4.0))


def test_observer_removed_after_exception(tmp_path: Path, axpy: Kernel) -> None:
    before = list(events_mod._observers)
    with pytest.raises(RuntimeError, match="app failed"), record(tmp_path) as rec:
        assert rec in events_mod._observers
        raise RuntimeError("app failed")
    assert events_mod._observers == before
    axpy(np.ones(4), np.ones(4), 1.0, 4)
    assert find_recordings(tmp_path) == []


def test_failed_launch_is_not_recorded(tmp_path: Path) -> None:
    bad = Kernel(AXPY.replace("a * x[:n]", "a * x[:n] / undefined_name"), "axpy",
                 backend="null")
    x, y = np.ones(4), np.ones(4)
    with record(tmp_path, max_instances=1) as rec, pytest.raises(KernelRuntimeError):
        bad(x, y, 1.0, 4)
    assert rec.paths == [] and rec.seen == {"axpy": 1}
    assert list(tmp_path.iterdir()) == []


def test_scalar_special_values_round_trip(tmp_path: Path, axpy: Kernel) -> None:
    with record(tmp_path, max_instances=None) as rec:
        for a in (float("nan"), float("-inf"), 1e-300):
            axpy(np.ones(2), np.ones(2), a, 2)
    vals = [load_recording(p).arg("a").value for p in rec.paths]
    assert np.isnan(vals[0]) and vals[1] == float("-inf") and vals[2] == 1e-300


def test_threads_record_exactly_max_instances(tmp_path: Path, axpy: Kernel) -> None:
    def work() -> None:
        x, y = np.ones(16), np.ones(16)
        for _ in range(10):
            axpy(x, y, 1.0, 16)

    with record(tmp_path, max_instances=7) as rec:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert rec.seen == {"axpy": 40} and rec.count == 7
    assert len(find_recordings(tmp_path)) == 7 and len({p.name for p in rec.paths}) == 7
    for p in rec.paths:
        load_recording(p, verify=True)


def test_bad_arguments_raise(tmp_path: Path) -> None:
    from kernforge.core import ConfigError
    with pytest.raises(ConfigError), record(tmp_path, max_instances=-1):
        pass
    with pytest.raises(ConfigError), record(tmp_path, skip=-2):
        pass


def test_cpu_backend_round_trip(tmp_path: Path) -> None:
    pytest.importorskip("kernforge.backends.cpu")
    from kernforge.core import BackendUnavailableError
    src = ("void scale(const double *x, double *y, double a, int n) {\n"
           "  for (int i = 0; i < n; i++) y[i] = a * x[i];\n}\n")
    try:
        k = Kernel(src, "scale", backend="cpu")
        x, y = np.arange(16.0), np.zeros(16)
        with record(tmp_path) as rec:
            k(x, y, 3.0, 16)
    except BackendUnavailableError as exc:
        pytest.skip(f"cpu backend unavailable: {exc}")
    r = load_recording(rec.paths[0], verify=True)
    assert r.backend == "cpu"
    np.testing.assert_array_equal(r.expected("y"), 3.0 * np.arange(16.0))
    assert r.arg("x").epilogue is None
