"""GPU: a kernel a program launches on arrays of several sizes (a CuPy ufunc's) replays in the
time its recorded launch's work took in the program, not that of the other sizes (issue 40:
``cupy_absolute`` recorded on 16 MiB, timed in the program on small arrays, 3.6 us against
13.4 us replayed). And the replay's spinning kernel runs on the device (without it every timed
launch would include the host's way into the driver).

Run on the GPU machine: ``pytest -m gpu tests/record/test_app_time_gpu.py -s``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated

pytestmark = pytest.mark.gpu

PROGRAM = """
import cupy as cp
big = cp.random.default_rng(1).standard_normal(1 << 21)  # float64, 16 MiB
small = [cp.ones(n) for n in (4096, 49152)]
y = cp.abs(big)                      # the first launch: the recorded one
for s in small * 3:
    cp.abs(s)                        # other work: never its in-program time
for _ in range(5):
    y = cp.abs(big)                  # the same work as the recorded launch
cp.cuda.Device().synchronize()
print("done", float(y[0]))
"""


def test_the_in_program_time_of_a_ufunc_is_of_its_recorded_size(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    prog = tmp_path / "sizes.py"
    prog.write_text(PROGRAM)
    status, units, problems, _ = record_command([sys.executable, str(prog)], tmp_path / "r",
                                                max_instances=1, kernels="cupy_absolute")
    assert status == 0 and not problems, problems
    (rec,) = [read_native(u) for u in units]
    cap = rec.capture
    assert cap["app_time_of"] == "5 unrecorded launches of the same work (events)", cap
    app = rec.in_program_s
    assert app is not None
    times = {}
    for flush in (True, False):
        out = run_isolated(rec.path, [NativeVariant()], repeat=20, warmup=5, flush=flush)
        m = out["measurements"][0]
        assert m.status.value == "OK", m
        times["flushed" if flush else "warm"] = m.median
    ratios = {k: v / app for k, v in times.items()}
    print(f"cupy_absolute on 2M float64: in program {app * 1e6:.2f} us "
          f"(recorded launch {cap['recorded_launch_ms'] * 1e3:.2f} us); replayed "
          + ", ".join(f"{k} {v * 1e6:.2f} us ({ratios[k]:.3f}x)" for k, v in times.items()))
    long = run_isolated(rec.path, [NativeVariant()], repeat=20, warmup=500, flush=False)
    print(f"warm after 500 warm-up runs instead of 5: {long['measurements'][0].median * 1e6:.2f}"
          " us (a difference: the GPU's clocks were still rising after 5)")
    # the protocol the unit would be given (the nearer one) within 15%; before the work key,
    # the in-program time was the small arrays' (a few us against ~13 us)
    assert min(abs(r - 1) for r in ratios.values()) <= 0.15, ratios


def test_the_replays_spinning_kernel_runs_on_the_device() -> None:
    from kernforge.backends.driver import Driver

    drv = Driver()
    assert drv.hold(10.0), "the spin kernel did not load: timed launches include launch latency"
    drv.synchronize()
