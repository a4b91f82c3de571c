"""The dynamic gates on real recordings of the null backend (Python kernels, no compiler)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kernforge
from kernforge.core import Recording, Status
from kernforge.harness.integrity import IntegrityError
from kernforge.harness.poison import poisoned_elements
from kernforge.harness.roofline import Bandwidth
from kernforge.record import find_recordings, load_recording
from kernforge.replay import checks as checks_mod
from kernforge.replay import prepare, replay
from kernforge.replay.checks import Integrity, roofline_gate, run_checks

SCALE = '''
def scale(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n]
'''
INC = '''
def inc(u: "double *", n: "int") -> None:
    u[:n] += 1.0
'''


def _record(root: Path, code: str, entry: str, *calls: tuple) -> Recording:
    k = kernforge.Kernel(code, entry, backend="null")
    with kernforge.record(root, skip=len(calls) - 1, max_instances=1):
        for args in calls:
            k(*args)
    return load_recording(find_recordings(root)[0])


@pytest.fixture()
def scale_twice(tmp_path: Path) -> Recording:
    """The second of two identical calls: y's prologue already holds the answer."""
    x, y = np.linspace(0.5, 1.5, 4096), np.zeros(4096)
    return _record(tmp_path, SCALE, "scale", (x, y, 2.0, 4096), (x, y, 2.0, 4096))


def _reason(m) -> str:
    return dict(m.extra).get("reason", "")


def _strict(rec: Recording, code: str, **kw) -> object:
    return replay(rec, source=rec.source.with_code(code), repeat=3, warmup=1,
                  integrity=Integrity(seed=1, **kw))


def test_unchanged_output_is_a_poison_target_and_partial_writes_fail(scale_twice) -> None:
    assert not scale_twice.arg("y").written  # the recording cannot tell: y did not change
    half = SCALE.replace("y[:n] = a * x[:n]", "y[:n // 2] = a * x[:n // 2]")
    assert replay(scale_twice, source=scale_twice.source.with_code(half)).ok  # naive: passes
    m = _strict(scale_twice, half)
    assert m.status is Status.WRONG_RESULT and _reason(m) == "poison:unwritten"
    assert "2048 element(s)" in m.message and m.failed_checks


def test_reading_stale_output_memory_is_named(scale_twice) -> None:
    stale = SCALE.replace("y[:n] = a * x[:n]", "y[:n] = a * x[:n] + (y[:n] != y[:n])")
    m = _strict(scale_twice, stale)
    assert _reason(m) == "poison:stale-read"


def test_in_place_kernels_are_not_poisoned_into_failure(tmp_path: Path) -> None:
    rec = _record(tmp_path, INC, "inc", (np.arange(100.0), 100))
    m = replay(rec, repeat=2, warmup=0, integrity="strict")
    assert m.ok, m.message
    notes = dict(m.extra)["integrity"]
    assert notes["poison"].startswith("vacuous") and "matched" in notes["fresh"]
    assert notes["roofline"]["verdict"] in ("ok", "not-applicable")


def test_fresh_inputs_catch_a_candidate_specialized_to_the_recording(tmp_path: Path) -> None:
    ones = np.ones(256)
    rec = _record(tmp_path, SCALE, "scale", (ones, np.zeros(256), 3.0, 256))
    special = SCALE.replace("y[:n] = a * x[:n]", "y[:n] = a  # x is all ones")
    assert replay(rec, source=rec.source.with_code(special)).ok
    m = _strict(rec, special)
    assert m.status is Status.WRONG_RESULT and _reason(m) == "fresh:mismatch"
    assert "seed 1" in m.message
    assert _strict(rec, special, fresh_trials=0).ok  # the gate is what catches it


def test_results_that_depend_on_the_call_are_nondeterministic(scale_twice) -> None:
    counted = ("CALLS = [0]\n" + SCALE.replace(
        "    y[:n] = a * x[:n]", "    CALLS[0] += 1\n    y[:n] = a * x[:n] + (CALLS[0] % 2)"))
    m = _strict(scale_twice, counted)
    assert m.status is Status.WRONG_RESULT and _reason(m) == "verify:nondeterministic"
    wrong = SCALE.replace("a * x[:n]", "a * x[:n] + 1.0")
    assert _reason(_strict(scale_twice, wrong)) == "verify:recorded"


def test_fresh_is_skipped_without_floating_point_data(tmp_path: Path) -> None:
    code = 'def twice(x: "const int *", y: "int *", n: "int") -> None:\n    y[:n] = 2 * x[:n]\n'
    rec = _record(tmp_path, code, "twice", (np.arange(50, dtype=np.int32),
                                            np.zeros(50, np.int32), 50))
    report = run_checks(rec, kernforge.get_backend("null"), rec.variant, None, Integrity())
    assert report.notes["fresh"].startswith("skipped") and "checked" in report.notes["poison"]


def test_reference_buffers_are_scrubbed(scale_twice) -> None:
    p = prepare(scale_twice)
    p.restore()
    p.run_once()
    p.scrub()
    assert all(poisoned_elements(a).all() for a in p.read_back().values())


def test_roofline_gate_refuses_an_impossible_time(monkeypatch, tmp_path: Path) -> None:
    n = 1 << 20
    rec = _record(tmp_path, SCALE, "scale", (np.linspace(0, 1, n), np.zeros(n), 2.0, n))
    fast = Bandwidth(1e11, 64 << 20, 0.0, "fixed for the test")
    monkeypatch.setattr(checks_mod, "copy_bandwidth", lambda be, nbytes: fast)
    be = kernforge.get_backend("null")
    with pytest.raises(IntegrityError) as err:  # the recorded kernel's time is measured
        roofline_gate(rec, be, 1e-9, None, 0.5)
    assert err.value.reason == "roofline:exceeded"
    assert roofline_gate(rec, be, 1.0, None, 0.5).verdict == "ok"


def test_a_fast_fluke_is_timed_again_beside_the_recorded_kernel(monkeypatch,
                                                                tmp_path: Path) -> None:
    """Issue 43: the bound's calibration timed the recorded kernel at another moment than
    the candidate. A candidate time below the bound is timed again, interleaved with the
    recorded kernel, and judged on that run: the unmodified kernel is never refused."""
    n = 1 << 20
    rec = _record(tmp_path, SCALE, "scale", (np.linspace(0, 1, n), np.zeros(n), 2.0, n))
    be = kernforge.get_backend("null")
    ref = prepare(rec, backend=be)
    seconds = float(np.median(ref.measure(warmup=1, repeat=3)))
    bw = Bandwidth(4 * n * 8 / seconds, 64 << 20, 0.0, "set so the bound is half its time")
    monkeypatch.setattr(checks_mod, "copy_bandwidth", lambda be, nbytes: bw)
    same = prepare(rec, backend=be)  # the seed: the recorded kernel itself
    check = roofline_gate(rec, be, seconds * 1e-3, None, 0.5,  # a fluke of its first timing
                          retime=lambda: same.measure(warmup=0, repeat=1)[0])
    assert check.verdict == "ok"
    assert check.candidate_s > 0.1 * seconds and check.original_s is not None


def test_the_recorded_kernel_is_timed_again_in_the_candidates_cache_state(
        monkeypatch, tmp_path: Path) -> None:
    """The re-timing measured the candidate in the unit's cache state (warm for a unit that
    fits the cache) but the recorded kernel always flushed: slower, so the bound was not
    calibrated down and a candidate fast from a warm cache could be refused as impossible."""
    n = 1 << 20
    rec = _record(tmp_path, SCALE, "scale", (np.linspace(0, 1, n), np.zeros(n), 2.0, n))
    be = kernforge.get_backend("null")
    flushes = []
    real_flush = be.flush_cache
    monkeypatch.setattr(be, "flush_cache", lambda: (flushes.append(1), real_flush())[1])
    monkeypatch.setattr(checks_mod, "copy_bandwidth",
                        lambda be, nbytes: Bandwidth(1.0, 64 << 20, 0.0, "every time is below"))
    same = prepare(rec, backend=be)
    roofline_gate(rec, be, 1e-9, None, 0.5, flush=False,
                  retime=lambda: same.measure(warmup=0, repeat=1, flush=False)[0])
    assert flushes == []


@pytest.mark.parametrize(("candidate", "refused"), [(2e-3, False), (1e-4, True)])
def test_the_bound_is_calibrated_by_the_recorded_kernels_fastest_run(
        monkeypatch, tmp_path: Path, candidate: float, refused: bool) -> None:
    """A load that slows most of the recorded kernel's runs in the re-timing must not make an
    honest candidate (as fast as the kernel's quiet runs) impossible; a cheat stays refused."""
    n = 1 << 20
    rec = _record(tmp_path, SCALE, "scale", (np.linspace(0, 1, n), np.zeros(n), 2.0, n))
    be = kernforge.get_backend("null")
    monkeypatch.setattr(checks_mod, "copy_bandwidth",
                        lambda be, nbytes: Bandwidth(1.0, 64 << 20, 0.0, "every time is below"))
    loaded = [6e-3, 2e-3, 6e-3, 6e-3, 2e-3]  # the recorded kernel: 2 ms quiet, 6 ms loaded
    monkeypatch.setattr(checks_mod, "round_robin",
                        lambda runs, passes: [loaded, [candidate] * passes])
    if refused:
        with pytest.raises(IntegrityError, match="impossible"):
            roofline_gate(rec, be, 1e-9, None, 0.5, retime=lambda: candidate)
    else:
        assert not roofline_gate(rec, be, 1e-9, None, 0.5, retime=lambda: candidate).refused


def test_basic_replay_failures_carry_reason_codes(scale_twice) -> None:
    m = replay(scale_twice, source=scale_twice.source.with_code(SCALE + "\nsyntax error("))
    assert m.status is Status.COMPILE_FAILED and _reason(m) == "compile:failed"
    wrong = SCALE.replace("a * x[:n]", "a * x[:n] + 1.0")
    assert _reason(replay(scale_twice, source=scale_twice.source.with_code(wrong))) \
        == "verify:recorded"
    with pytest.raises(kernforge.KernforgeError, match="integrity level"):
        replay(scale_twice, integrity="paranoid")
