"""The forge times through the harness protocol, and asks the device for exactly what it asked
before the protocol moved there (the figures stay comparable).

A stand-in CuPy records every call the cuda backend makes (flush, stream hold, events,
synchronize); the forge's timing from before the move (``_old_once``/``_old_measure``, kept here
verbatim but for names) runs on the same stand-in, and both call sequences must be equal.
"""

from __future__ import annotations

import time
import types
from typing import Any

import pytest

from kernforge.backends.base import Backend
from kernforge.backends.cuda import CudaBackend
from kernforge.core import ConfigError, KernelRuntimeError
from kernforge.forge.measure import PROTOCOL, GpuDevice
from kernforge.harness import Protocol, measure_runs, round_robin, time_once


class _Event:
    def __init__(self, trace: list[str], name: str) -> None:
        self.trace, self.name = trace, name

    def record(self) -> None:
        self.trace.append(f"record:{self.name}")

    def synchronize(self) -> None:
        self.trace.append(f"wait:{self.name}")
        if "fault" in self.trace:
            raise RuntimeError("an illegal memory access was encountered")


def fake_cupy(trace: list[str]) -> Any:
    class Buffer:
        def fill(self, _value: int) -> None:
            trace.append("flush")

    class Module:
        def __init__(self, code: str = "") -> None:
            pass

        def get_function(self, name: str) -> Any:
            return lambda grid, block, args: trace.append(f"spin:{int(args[0])}")

    stream = types.SimpleNamespace(synchronize=lambda: trace.append("sync"))
    cuda = types.SimpleNamespace(get_elapsed_time=lambda a, b: 0.5,
                                 get_current_stream=lambda: stream,
                                 driver=types.SimpleNamespace(CUDADriverError=RuntimeError),
                                 runtime=types.SimpleNamespace(CUDARuntimeError=RuntimeError))
    return types.SimpleNamespace(cuda=cuda, RawModule=Module, int32="int32",
                                 empty=lambda n, dtype=None: Buffer())


def traced_backend() -> tuple[CudaBackend, list[str]]:
    """The real cuda backend's timing code over the stand-in (no GPU)."""
    trace: list[str] = []
    be = CudaBackend.__new__(CudaBackend)
    Backend.__init__(be)
    be.cp = be.xp = fake_cupy(trace)
    be.props = {"l2CacheSize": 1 << 20}
    be._flush = be._spin = None
    be._events = (_Event(trace, "start"), _Event(trace, "end"))
    return be, trace


class Runner:
    def __init__(self, trace: list[str], launches: int = 2, synchronous: bool = False) -> None:
        self.name, self.trace, self.launches = "op", trace, launches
        self.synchronous = synchronous

    def run(self) -> None:
        self.trace.extend(f"launch{k}" for k in range(self.launches))

    def output(self) -> None:
        return None


# ---- the forge's timing before it went through the harness (measure.py, verbatim) ----------
def _old_once(dev: Any, runner: Any, hold_s: float = 1e-3, flush: bool = True) -> float:
    start, end = dev._events
    if flush:
        dev.backend.flush_cache()
    if getattr(runner, "synchronous", False):
        dev.synchronize()
        t0 = time.perf_counter()
        runner.run()
        return time.perf_counter() - t0
    dev.backend.hold_stream(hold_s)
    start.record()
    runner.run()
    end.record()
    try:
        end.synchronize()
    except Exception as exc:
        raise KernelRuntimeError(f"{runner.name} failed on the device: {exc}",
                                 hint="the CUDA context is unusable after this") from exc
    return float(dev.cp.cuda.get_elapsed_time(start, end)) * 1e-3


def _old_measure(dev: Any, runner: Any, *, warmup: int = 3, repeat: int = 10) -> list[float]:
    for _ in range(warmup):
        runner.run()
    dev.synchronize()
    return [_old_once(dev, runner) for _ in range(repeat)]


def _pair() -> tuple[GpuDevice, list[str], GpuDevice, list[str]]:
    new_be, new_trace = traced_backend()
    old_be, old_trace = traced_backend()
    old = GpuDevice(backend=old_be)
    old._events = old_be._events  # type: ignore[attr-defined]  # the old device's own pair
    return GpuDevice(backend=new_be), new_trace, old, old_trace


@pytest.mark.parametrize(("warmup", "repeat"), [(3, 10), (2, 5), (0, 2)])
@pytest.mark.parametrize("synchronous", [False, True])
def test_measure_asks_the_device_what_the_forge_asked_before(warmup: int, repeat: int,
                                                             synchronous: bool) -> None:
    new, new_trace, old, old_trace = _pair()
    got = new.measure(Runner(new_trace, synchronous=synchronous), warmup=warmup, repeat=repeat)
    want = _old_measure(old, Runner(old_trace, synchronous=synchronous), warmup=warmup,
                        repeat=repeat)
    assert new_trace == old_trace and len(got) == len(want) == repeat
    if not synchronous:
        assert got == want == [0.5e-3] * repeat
        assert old_trace[:2 * warmup + 1] == ["launch0", "launch1"] * warmup + ["sync"]
        assert old_trace[2 * warmup + 1:2 * warmup + 8] == [
            "flush", "spin:1000000", "record:start", "launch0", "launch1", "record:end",
            "wait:end"]


def test_once_and_compare_ask_what_they_asked_before() -> None:
    new, new_trace, old, old_trace = _pair()
    a, b = Runner(new_trace, 1), Runner(new_trace, 3)
    assert new.once(a) == _old_once(old, Runner(old_trace, 1))
    ab = new.compare(a, b, passes=3, per_pass=2)
    old_a, old_b = Runner(old_trace, 1), Runner(old_trace, 3)
    for p in range(8):  # harness.interleave: the side that goes first alternates
        for _ in range(2):
            first, second = (old_a, old_b) if p % 2 == 0 else (old_b, old_a)
            _old_once(old, first)
            _old_once(old, second)
    # 3 passes asked, 8 taken: the first look waits for enough passes for a 99% interval
    assert new_trace == old_trace and ab.passes == 8


def test_a_fault_is_the_runners_typed_error() -> None:
    dev, trace, _, _ = _pair()
    trace.append("fault")
    with pytest.raises(KernelRuntimeError, match="op failed on the device") as info:
        dev.once(Runner(trace))
    assert "unusable" in (info.value.hint or "")


def test_the_forges_settings_are_explicit() -> None:
    assert PROTOCOL == Protocol(warmup=3, repeat=10, flush=True, passes=7, per_pass=3,
                                hold_s=1e-3, warmup_queued=True)
    # the replay protocol's defaults are untouched: the backend's hold, timed warm-ups
    assert Protocol().hold_s is None and not Protocol().warmup_queued
    with pytest.raises(ConfigError, match="hold_s"):
        Protocol(hold_s=5.0)
    with pytest.raises(ConfigError, match="per_pass"):
        Protocol(per_pass=0)


def test_replay_settings_time_each_warm_up_as_a_protocol_run() -> None:
    be, trace = traced_backend()
    restores: list[int] = []
    samples = measure_runs(be, Runner(trace, 1).run, Protocol(warmup=2, repeat=1),
                           restore=lambda: restores.append(len(trace)))
    assert len(samples) == 1 and len(restores) == 3
    assert trace == ["spin:50000", "record:start", "launch0", "record:end", "wait:end"] * 2 + [
        "flush", "spin:50000", "record:start", "launch0", "record:end", "wait:end"]
    trace.clear()
    time_once(be, Runner(trace, 1).run, Protocol(flush=False, hold_s=0.0))
    assert trace == ["spin:0", "record:start", "launch0", "record:end", "wait:end"]


def test_round_robin_runs_every_runner_once_per_pass_in_order() -> None:
    order: list[str] = []

    def runner(name: str) -> Any:
        def run() -> float:
            order.append(name)
            return 1.0
        return run

    runs = [runner(name) for name in "abc"]
    samples = round_robin(runs, passes=2)
    assert order == list("abcabc") and samples == [[1.0, 1.0]] * 3
    with pytest.raises(ConfigError):
        round_robin([], passes=1)
