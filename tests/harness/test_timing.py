"""The protocol: restore before every run, never inside the timed region; counts; flushes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from kernforge.backends import Compiled
from kernforge.backends.null import NullBackend
from kernforge.core import ConfigError, KernelSource, LaunchConfig, Variant
from kernforge.harness import Protocol, measure

INC = '''
def inc(u: "double *", n: "int") -> None:
    u[:n] += 1.0
'''


class TracingBackend(NullBackend):
    """The null backend, instrumented: records restores, flushes and timed launches."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.timing = False

    def restore(self, buffer: np.ndarray, array: np.ndarray) -> None:
        assert not self.timing, "restore inside the timed region"
        self.events.append("restore")
        super().restore(buffer, array)

    def flush_cache(self) -> None:
        assert not self.timing, "flush inside the timed region"
        self.events.append("flush")

    def time_launch(self, compiled: Compiled, args: Sequence[Any], launch: LaunchConfig) -> float:
        self.timing = True
        try:
            return super().time_launch(compiled, args, launch)
        finally:
            self.timing = False

    def _launch(self, handle: Any, args: Sequence[Any], launch: LaunchConfig) -> None:
        assert self.timing, "kernel launched outside time_launch"
        self.events.append("launch")
        super()._launch(handle, args, launch)


@pytest.fixture()
def setup():
    be = TracingBackend()
    compiled = be.compile(Variant(KernelSource(INC, "inc", "python")))
    prologue = np.arange(5, dtype=np.float64)
    buf = be.to_device(prologue)

    def restore() -> None:
        be.restore(buf, prologue)

    return be, compiled, [buf, 5], restore, buf, prologue


def test_restore_before_every_run_and_flush_per_timed_run(setup):
    be, compiled, args, restore, buf, prologue = setup
    samples = measure(be, compiled, args, None, restore, warmup=2, repeat=4)
    assert len(samples) == 4 and all(s >= 0 for s in samples)
    assert be.events == ["restore", "launch"] * 2 + ["restore", "flush", "launch"] * 4
    np.testing.assert_array_equal(buf, prologue + 1)  # one launch after the last restore


def test_no_flush_and_counts(setup):
    be, compiled, args, restore, _, _ = setup
    samples = measure(be, compiled, args, LaunchConfig(), restore, warmup=0, repeat=7,
                      flush=False)
    assert len(samples) == 7
    assert be.events == ["restore", "launch"] * 7


def test_defaults_are_three_warmups_ten_runs(setup):
    be, compiled, args, restore, _, _ = setup
    assert len(measure(be, compiled, args, None, restore)) == 10
    assert be.events.count("launch") == 13 and be.events.count("restore") == 13
    assert be.events.count("flush") == 10


def test_bad_counts_are_config_errors(setup):
    be, compiled, args, restore, _, _ = setup
    with pytest.raises(ConfigError):
        measure(be, compiled, args, None, restore, repeat=-1)
    with pytest.raises(ConfigError):
        Protocol(warmup=-1)
    with pytest.raises(ConfigError):
        Protocol(passes=0)
    assert Protocol() == Protocol(warmup=3, repeat=10, flush=True, passes=7)
