"""The replay engine on real Recording objects of the null backend (Python kernels)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.backends import Knob
from kernforge.backends.fingerprint import host_fingerprint
from kernforge.backends.null import NullBackend
from kernforge.core import (
    CompileOptions,
    ConfigError,
    KernelSource,
    LaunchConfig,
    RecordedArg,
    Recording,
    Status,
    Tolerance,
    WrongResultError,
)
from kernforge.replay import compare, prepare, replay

SCALE = '''
def scale(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = A * a * x[:n]
'''
INC = '''
def inc(u: "double *", n: "int") -> None:
    u[:n] += 1.0
'''


def make_recording(tmp_path: Path, code: str, entry: str, values: dict[str, Any],
                   defines: dict[str, str] | None = None, backend: str = "null",
                   policies: dict[str, Tolerance] | None = None) -> Recording:
    """Run the kernel once on the null backend and keep what a recorder would keep."""
    be = NullBackend()
    source = KernelSource(code, entry, "python")
    rec = Recording(tmp_path / entry, source, CompileOptions(), LaunchConfig(),
                    tuple((defines or {}).items()), backend, ())
    compiled = be.compile(rec.variant)
    bufs = {k: be.to_device(v) for k, v in values.items() if isinstance(v, np.ndarray)}
    be.launch(compiled, [bufs.get(p.name, values[p.name]) for p in compiled.signature])
    blobs: dict[str, np.ndarray] = {}

    def put(a: np.ndarray) -> str:
        key = hashlib.sha256(a.tobytes()).hexdigest()[:16]
        blobs[key] = a.copy()
        return key

    args = []
    for p in compiled.signature:
        v = values[p.name]
        if isinstance(v, np.ndarray):
            after = be.to_host(bufs[p.name])
            changed = after.tobytes() != v.tobytes()
            args.append(RecordedArg(p.name, "array", p.dtype, v.shape, prologue=put(v),
                                    epilogue=put(after) if changed else None,
                                    policy=(policies or {}).get(p.name, Tolerance())))
        else:
            args.append(RecordedArg(p.name, "scalar", p.dtype, value=v))
    return Recording(rec.path, source, rec.options, rec.launch, rec.defines, backend,
                     tuple(args), loader=blobs.__getitem__)


@pytest.fixture()
def scale_rec(tmp_path: Path) -> Recording:
    x = np.linspace(0.0, 1.0, 64)
    return make_recording(tmp_path, SCALE, "scale",
                          {"x": x, "y": np.zeros(64), "a": 0.5, "n": 64}, {"A": "2"})


def test_ok_replay_has_samples_checks_and_stages(scale_rec):
    m = replay(scale_rec, repeat=5, warmup=1)
    assert m.status is Status.OK, m.message
    assert len(m.samples) == 5 and all(s >= 0 for s in m.samples)
    assert [c.name for c in m.checks] == ["x", "y"] and all(c.passed for c in m.checks)
    stages = dict(m.stages)
    assert set(stages) == {"compile", "restore", "run", "verify", "measure"}
    assert m.to_json()["status"] == "OK"


def test_verify_only_has_no_samples(scale_rec):
    m = replay(scale_rec, verify_only=True)
    assert m.ok and m.samples == () and len(m.checks) == 2


def test_define_that_changes_arithmetic_is_wrong_result(scale_rec):
    m = replay(scale_rec, defines={"A": 3})
    assert m.status is Status.WRONG_RESULT
    assert [c.name for c in m.failed_checks] == ["y"]
    assert m.message.startswith(f"{scale_rec.name} fails verification: y: ")
    assert "63/64 elements differ" in m.message  # y[0] = 0 either way
    assert m.samples == ()


def test_compile_error_is_compile_failed_with_message(scale_rec):
    broken = scale_rec.source.with_code(SCALE + "\nimport no_such_module_kf\n")
    m = replay(scale_rec, source=broken)
    assert m.status is Status.COMPILE_FAILED
    assert "failed to load" in m.message and "no_such_module_kf" in m.message
    assert dict(m.extra)["error"] == "CompileError"


def test_unknown_option_and_bad_values_are_invalid_config(scale_rec):
    m = replay(scale_rec, options={"unroll": 4})
    assert m.status is Status.INVALID_CONFIG and "unroll" in m.message
    assert replay(scale_rec, options={"opt_level": "O9"}).status is Status.INVALID_CONFIG
    assert replay(scale_rec, defines={"not a name": 1}).status is Status.INVALID_CONFIG
    assert replay(scale_rec, options={"opt_level": "O3"}).ok


def test_changed_signature_is_invalid_config(scale_rec):
    renamed = scale_rec.source.with_code(SCALE.replace("y:", "out:").replace("y[", "out["))
    m = replay(scale_rec, source=renamed)
    assert m.status is Status.INVALID_CONFIG and "do not match" in m.message


def test_kernel_that_raises_is_runtime_failed(scale_rec):
    crash = scale_rec.source.with_code(SCALE.replace("y[:n] =", "y[:n] = 1 / 0 +"))
    m = replay(scale_rec, source=crash)
    assert m.status is Status.RUNTIME_FAILED and "ZeroDivisionError" in m.message


def test_kernel_that_writes_its_input_is_wrong_result(scale_rec):
    sneaky = scale_rec.source.with_code(SCALE + "    x[0] = -1.0\n")
    m = replay(scale_rec, source=sneaky)
    assert m.status is Status.WRONG_RESULT
    assert [c.name for c in m.failed_checks] == ["x"]
    assert "x: 1/64 elements differ" in m.message


def test_tolerance_override_accepts_tiny_difference_and_reports_it(scale_rec):
    noisy = scale_rec.source.with_code(SCALE.replace("x[:n]", "x[:n] * (1 + 1e-12)"))
    assert replay(scale_rec, source=noisy).status is Status.WRONG_RESULT
    for tol in (Tolerance("rel", rtol=1e-9), {"y": Tolerance("abs", atol=1e-9)},
                {"y": "norm:1e-9"}):
        m = replay(scale_rec, source=noisy, tolerance=tol, repeat=2)
        assert m.ok, m.message
        y = {c.name: c for c in m.checks}["y"]
        assert y.passed and y.mismatches > 0 and 0 < y.max_abs < 1e-11
    with pytest.raises(ConfigError):  # a buffer the recording does not have: caller's error
        replay(scale_rec, tolerance={"z": Tolerance("abs", atol=1.0)})


def test_restore_makes_in_place_kernels_repeatable(tmp_path):
    rec = make_recording(tmp_path, INC, "inc", {"u": np.arange(8.0), "n": 8})
    for _ in range(3):
        m = replay(rec, repeat=10)
        assert m.ok, m.message
        assert len(m.samples) == 10
    p = prepare(rec)
    p.measure(warmup=3, repeat=10)
    assert all(c.passed for c in p.verify())  # u == prologue + 1 after 13 runs


class FastMathBackend(NullBackend):
    """Null backend with one knob that needs a declared tolerance, and traced restores."""

    name = "null"

    def __init__(self) -> None:
        super().__init__()
        self.timing = False
        self.restores = 0

    def knobs(self) -> tuple[Knob, ...]:
        return super().knobs() + (Knob("fast_math", "bool", False, needs_tolerance=True),)

    def restore(self, buffer: np.ndarray, array: np.ndarray) -> None:
        assert not self.timing
        self.restores += 1
        super().restore(buffer, array)

    def time_launch(self, compiled, args: Sequence[Any], launch: LaunchConfig) -> float:
        self.timing = True
        try:
            return super().time_launch(compiled, args, launch)
        finally:
            self.timing = False


def test_options_that_change_bits_need_a_tolerance(scale_rec):
    be = FastMathBackend()
    m = replay(scale_rec, backend=be, options={"fast_math": True})
    assert m.status is Status.INVALID_CONFIG and "bit-for-bit" in m.message
    assert "tolerance" in dict(m.extra)["hint"]
    m = replay(scale_rec, backend=be, options={"fast_math": True},
               tolerance=Tolerance("rel", rtol=1e-6), repeat=4, warmup=2)
    assert m.ok, m.message
    # replay restores x and y before the verified run, then only the written y before each of
    # the 6 measured runs (a variant that verified left its inputs alone)
    assert be.restores == 2 + 6


def test_bad_protocol_arguments_raise(scale_rec):
    with pytest.raises(ConfigError):
        replay(scale_rec, repeat=-1)


def test_compare_same_variant_is_about_one(scale_rec):
    r = compare(scale_rec, {}, {"options": {"opt_level": "O3"}}, passes=3, per_pass=2)
    assert r.passes == 8 and r.speedup > 0  # the first look: enough for a 99% interval
    assert len(r.samples_a) == 8 and len(r.samples_b[0]) == 2


def test_compare_slower_source_override(tmp_path):
    x = np.linspace(0.0, 1.0, 16)
    rec = make_recording(tmp_path, SCALE, "scale",
                         {"x": x, "y": np.zeros(16), "a": 0.5, "n": 16}, {"A": "2"})
    slow = SCALE.replace("    y[:n]", "    import time; time.sleep(0.02)\n    y[:n]")
    r = compare(rec, {"source": slow}, rec.variant, passes=3, per_pass=2, warmup=1)
    # 20 ms against microseconds: B's median would have to stall 10 ms for this to fail
    assert r.speedup > 2.0  # B (the recorded one) is much faster than A


def test_compare_raises_on_a_wrong_variant(scale_rec):
    with pytest.raises(WrongResultError) as err:
        compare(scale_rec, {}, {"defines": {"A": 5}}, passes=1)
    assert "variant b" in str(err.value) and "y:" in str(err.value)
    with pytest.raises(ConfigError, match="unknown key 'flags' in the variant overrides"):
        compare(scale_rec, {}, {"flags": 1})


STATEFUL = '''
def bump(x: "double *", n: "int") -> None:
    global CALLS
    CALLS = globals().get("CALLS", 0) + 1
    x[:n] += 1.0 if CALLS == 1 else 2.0
'''


def test_a_candidate_whose_later_runs_differ_is_caught(tmp_path):
    """It verifies on its first run and goes wrong afterwards: the re-check after timing."""
    import kernforge
    from kernforge.record import find_recordings, load_recording

    k = kernforge.Kernel(STATEFUL.replace("2.0", "1.0"), "bump", backend="null")
    x = np.zeros(8)
    with kernforge.record(tmp_path):
        k(x, 8)
    rec = load_recording(find_recordings(tmp_path)[0])
    assert replay(rec, repeat=3).ok
    m = replay(rec, source=rec.source.with_code(STATEFUL), repeat=3)
    assert m.status is Status.WRONG_RESULT and "last timed run" in m.message


def test_a_recording_made_with_fast_math_replays_bitwise_as_recorded(tmp_path):
    """The recorded options are the reference: keeping them needs no tolerance."""
    import kernforge
    from kernforge.core import Tolerance
    from kernforge.record import find_recordings, load_recording

    src = "void q(const double *x, double *y, int n) { for (int i = 0; i < n; i++) y[i] = x[i] / 3.0; }"
    k = kernforge.Kernel(src, "q", backend="cpu", options={"fast_math": True},
                         tolerance={"y": "rel:1e-12"})
    x, y = np.linspace(1, 2, 64), np.zeros(64)
    with kernforge.record(tmp_path):
        k(x, y, 64)
    rec = load_recording(find_recordings(tmp_path)[0])
    m = replay(rec, tolerance={"y": Tolerance()}, repeat=2)
    assert m.ok, m.message
    assert all(c.mode == "bitwise" and c.passed for c in m.checks)


class ShortFingerprints(NullBackend):
    """Null backend that fingerprints on the "device", but for several buffers at once returns
    ``[]`` or a list one short (a buggy backend)."""

    name = "null"

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def fingerprints(self, buffers: Sequence[Any]) -> list[tuple[int, int]] | None:
        full = [host_fingerprint(np.asarray(b)) for b in buffers]
        if len(buffers) <= 1:
            return full
        return [] if self.mode == "empty" else full[:-1]


@pytest.mark.parametrize("mode", ["empty", "short"])
def test_missing_fingerprints_fall_back_to_host_verification(scale_rec, mode: str) -> None:
    be = ShortFingerprints(mode)
    wrong = scale_rec.variant.with_(defines={"A": "3"})
    p = prepare(scale_rec, backend=be, variant=wrong)
    assert p.expected_fp is not None  # single-buffer fingerprints worked
    p.restore()
    p.run_once()
    checks = p.verify()
    assert [c.name for c in checks] == ["x", "y"]  # never fewer checks than buffers
    assert [c.passed for c in checks] == [True, False]
    assert len(p.fingerprint()) == 2
    m = replay(scale_rec, backend=be, defines={"A": "3"})
    assert m.status is Status.WRONG_RESULT, m.message
    good = prepare(scale_rec, backend=be)
    good.restore()
    good.run_once()
    assert [c.passed for c in good.verify()] == [True, True]


def test_a_backend_without_one_fingerprint_per_buffer_verifies_on_the_host(scale_rec) -> None:
    class NoneEver(ShortFingerprints):
        def fingerprints(self, buffers: Sequence[Any]) -> list[tuple[int, int]] | None:
            return []

    p = prepare(scale_rec, backend=NoneEver("empty"),
                variant=scale_rec.variant.with_(defines={"A": "3"}))
    assert p.expected_fp is None
    p.restore()
    p.run_once()
    assert [c.passed for c in p.verify()] == [True, False]
