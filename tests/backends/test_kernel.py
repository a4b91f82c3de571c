"""kernforge.Kernel on the cpu and null backends, and launch observers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.backends import Kernel, LaunchEvent, add_observer, remove_observer
from kernforge.core import (
    ArgumentError,
    BackendUnavailableError,
    ConfigError,
    KernelRuntimeError,
    LaunchConfig,
    SignatureError,
)
from kernforge.testing.backends import SAMPLES

BACKENDS = {"cpu": SAMPLES["c"].axpy, "null": SAMPLES["python"].axpy}


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "cache"))


def _kernel(name: str, **kw: Any) -> Kernel:
    src = BACKENDS[name]
    try:
        return Kernel(src.code, src.entry, backend=name, **kw)
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))


class Spy:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def before(self, event: LaunchEvent) -> Any:
        copies = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                  for a in event.args]
        self.events.append(("before", (event.name, len(event.args), event.launch.threads,
                                       copies)))
        self.last = event
        return len(self.events)

    def after(self, token: Any, error: BaseException | None) -> None:
        self.events.append(("after", (token, error)))


@pytest.fixture
def spy() -> Iterator[Spy]:
    s = Spy()
    add_observer(s)
    yield s
    remove_observer(s)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_kernel_call_computes(name: str) -> None:
    k = _kernel(name, defines={"SHIFT": 1})
    x, y = np.arange(5.0), np.ones(5)
    k(x, y, 2.0, 5, threads=2)
    assert y.tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert k.compiled() is k.compiled() and k.name == "axpy" and name in repr(k)


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_observers_see_before_and_after(name: str, spy: Spy) -> None:
    k = _kernel(name)
    x, y = np.arange(3.0), np.zeros(3)
    k(x, y, 1.0, 3, threads=1)
    (kind0, (entry, nargs, threads, before)), (kind1, (token, error)) = spy.events
    assert (kind0, entry, nargs, threads, kind1, token, error) == (
        "before", "axpy", 4, 1, "after", 1, None)
    assert before[1].tolist() == [0.0, 0.0, 0.0] and y.tolist() == [0.0, 1.0, 2.0]
    ev = spy.last
    assert ev.backend is k.backend and ev.signature == k.compiled().signature
    assert ev.variant.source == k.source and ev.variant.launch.threads == 1
    assert ev.variant.options == k.compiled().variant.options  # resolved
    assert ev.capture == {} and ev.policy("y").exact  # no provenance beyond the event itself
    assert [p.name for p, _ in ev.pairs] == ["x", "y", "a", "n"]


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_observers_see_the_error_of_a_failed_launch(name: str, spy: Spy) -> None:
    k = _kernel(name)
    with pytest.raises(ArgumentError):
        k(np.zeros(3), np.zeros(3), 1.0)
    assert spy.events[-1][0] == "after" and isinstance(spy.events[-1][1][1], ArgumentError)


def test_runtime_error_reaches_observers(spy: Spy) -> None:
    k = Kernel('def boom(x: "double *") -> None:\n    raise RuntimeError("bad")', "boom",
               backend="null")
    with pytest.raises(KernelRuntimeError, match="bad"):
        k(np.zeros(1))
    assert isinstance(spy.events[-1][1][1], KernelRuntimeError)


def test_launch_config_overrides() -> None:
    k = _kernel("null", launch=LaunchConfig(grid=4, threads=2))
    cfg = k.launch_config(block=32)
    assert cfg.grid == (4, 1, 1) and cfg.block == (32, 1, 1) and cfg.threads == 2
    assert k.launch_config(LaunchConfig(shared_mem=8), threads=5).threads == 5


def test_missing_entry_is_config_error() -> None:
    with pytest.raises(ConfigError, match="entry"):
        Kernel(SAMPLES["python"].axpy.code, backend="null")
    k = Kernel(SAMPLES["python"].axpy.code, "nope", backend="null")
    with pytest.raises(SignatureError, match="'nope' not found"):
        k(np.zeros(1))


def test_tolerance_unlocks_fast_math() -> None:
    strict = _kernel("cpu", options={"fast_math": True})
    with pytest.raises(ConfigError, match="fast_math"):
        strict(np.zeros(2), np.zeros(2), 1.0, 2)
    loose = _kernel("cpu", options={"fast_math": True}, tolerance={"y": "rel:1e-12"})
    y = np.ones(2)
    loose(np.ones(2), y, 1.0, 2)
    assert loose.tolerant and y.tolist() == [2.0, 2.0]


TWO_OUTPUTS = """
void two(const double *x, double *y, double *z, int n) {
    for (int i = 0; i < n; i++) { y[i] = x[i] * 0.1; z[i] = x[i] / 3.0; }
}
"""


def test_fast_math_needs_a_tolerance_on_every_written_buffer() -> None:
    from kernforge.core import ConfigError

    only_y = Kernel(TWO_OUTPUTS, "two", backend="cpu", options={"fast_math": True},
                    tolerance={"y": "rel:1e-12"})
    with pytest.raises(ConfigError, match="bit-for-bit"):
        only_y.compiled()
    both = Kernel(TWO_OUTPUTS, "two", backend="cpu", options={"fast_math": True},
                  tolerance={"y": "rel:1e-12", "z": "rel:1e-12"})
    assert both.tolerant
    typo = Kernel(TWO_OUTPUTS, "two", backend="cpu", tolerance={"w": "rel:1e-12"})
    with pytest.raises(ConfigError, match="not an array parameter"):
        typo.compiled()


REAL_KERNEL = """
#ifndef REAL
#define REAL double
#endif
void half(const REAL *x, REAL *y, int n) { for (int i = 0; i < n; i++) y[i] = x[i] * 0.5; }
"""


def test_defines_decide_parameter_types() -> None:
    from kernforge.core import ArgumentError

    k = Kernel(REAL_KERNEL, "half", backend="cpu", defines={"REAL": "float"})
    with pytest.raises(ArgumentError, match="float32"):
        k(np.ones(4), np.zeros(4), 4)
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    k(x, y, 4)
    assert y.tolist() == [0.5] * 4


def test_scalars_that_do_not_fit_and_read_only_outputs_are_refused() -> None:
    from kernforge.core import ArgumentError

    k = Kernel(REAL_KERNEL, "half", backend="cpu", defines={"REAL": "float"})
    x, y = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ArgumentError, match="int32"):
        k(x, y, 2**40)
    y.flags.writeable = False
    with pytest.raises(ArgumentError, match="read-only"):
        k(x, y, 4)
    flt = Kernel("void f(float a, float *y) { y[0] = a; }", "f", backend="cpu")
    with pytest.raises(ArgumentError, match="overflow"):
        flt(1e300, np.zeros(1, np.float32))
