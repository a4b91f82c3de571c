"""Issue 29 on the GPU (``pytest -m gpu``): an evolution whose command proposer returns, in
order, a kernel that reads far out of bounds, one that traps, one that never ends and an honest
faster rewrite. The run completes; the three are classified with their causes (an illegal
address or a launch failure: RUNTIME_FAILED, the worker replaced in a fresh context; the hang:
TIMEOUT); the honest one is evaluated correctly, wins, and passes validation (compute-sanitizer
included); the seed's own validation is unaffected. Prints the figures."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from kernforge.core import BackendUnavailableError, Status
from kernforge.pipeline.evolve import evolve_kernel
from kernforge.pipeline.evolve_config import config_from_dict
from kernforge.record import find_recordings, load_recording, record
from kernforge.replay import evaluate_variant
from kernforge.replay.isolate import Isolation, Limits

from .test_evolve_isolation import PROPOSER, _evaluations, _sr

pytestmark = pytest.mark.gpu
SEED = r"""
extern "C" __global__ void smooth(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float waste = 0.0f;
    for (int r = 0; r < 4000; r++) waste += x[i] * r;
    y[i] = 2.0f * x[i] + 1.0f + waste * 0.0f;
}
"""
# The waste reaches the result (times zero: the same bits for finite x, which the compiler cannot
# assume without fast math), so the loop stays: 4,000 instructions per thread against 32 once it
# is removed. A volatile local that reaches nothing is dropped by CUDA 13's ptxas (the two
# compiled to the same 32 instructions), and the "faster" rewrite then tied with the seed.
WASTE = "    for (int r = 0; r < 4000; r++) waste += x[i] * r;"
ANCHOR = "    if (i >= n) return;"
BAD = {"oob": "    if (x[(long long)i + (1LL << 36)] == 12345.0f) y[i] = 0.0f;",  # 256 GiB on
       "trap": "    if (i == 0) asm volatile(\"trap;\");",
       # thread 0 compares two volatile global loads of the same word as integers (no NaN
       # can end it): the compiler may neither merge nor drop the loads, nor assume the loop
       # ends. (A loop on a volatile local, `for (volatile int s = 0; s >= 0; s += 0)`, ran to
       # completion on the H200: status OK, no hang.)
       "hang": "    if (i == 0) { volatile const unsigned *w = (volatile const unsigned *)x; "
               "while (w[0] == w[0]) { } }"}


def _reply(what: str) -> str:
    return _sr(WASTE, "") if what == "honest" else _sr(ANCHOR, f"{ANCHOR}\n{BAD[what]}")


def _kind(code: str) -> str:
    return next((w for w, line in BAD.items() if line in code),
                "honest" if WASTE not in code else "seed")


@pytest.fixture(scope="module")
def recs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kernforge import Kernel

    where = tmp_path_factory.mktemp("evolve-isolation-gpu") / "rec"
    try:
        import cupy

        k = Kernel(SEED, "smooth", backend="cuda")
    except (ImportError, BackendUnavailableError) as exc:
        pytest.skip(str(exc))
    n = 1 << 20
    x = cupy.asarray(np.linspace(0.0, 1.0, n, dtype=np.float32))
    y = cupy.zeros(n, dtype=cupy.float32)
    with record(where, kernels="smooth"):
        k(x, y, np.int32(n), grid=((n + 255) // 256,), block=(256,))
    return where


def test_gpu_faulty_candidates_cost_only_themselves(recs: Path, tmp_path: Path) -> None:
    order = ["oob", "trap", "hang", "honest"]
    (tmp_path / "replies.json").write_text(json.dumps([_reply(w) for w in order]))
    (tmp_path / "proposer.py").write_text(PROPOSER)
    cmd = [sys.executable, str(tmp_path / "proposer.py"), str(tmp_path / "replies.json"),
           str(tmp_path / "counter")]
    cfg = config_from_dict({"evolve": {"seed": 1, "max_iterations": 4, "eval_slots": 1,
                                       "llm_slots": 1, "max_in_flight": 1},
                            "proposers": [{"kind": "command", "command": cmd}],
                            "tuner": {"trials": 4, "repeat": 5}}, "gpu")
    group = [load_recording(p) for p in find_recordings(recs)]
    with Isolation(limits=Limits(min_timeout_s=5.0)) as iso:
        out = evolve_kernel(group, cfg, tmp_path / "run", isolate=iso)
        replaced = iso.replaced
        seed_after = evaluate_variant(group[0], group[0].variant, isolate=iso)
    seen = {_kind(c): v for c, v in _evaluations(tmp_path / "run" / "evolve.db").items()}
    print(f"\nevolve on the GPU: worker replaced {replaced} time(s)")
    for kind in ("seed", *order):
        status, msg = seen[kind]
        print(f"  {kind:7s} {status.value:15s} {msg.splitlines()[0][:110] if msg else ''}")
    f = out.final
    print(f"  winner: {_kind(f.best.code) if f.best else None}, status {f.status}, "
          f"speedup {f.speedup:.2f}x; the seed after the faults: {seed_after.status.value}")
    assert seen["oob"][0] is Status.RUNTIME_FAILED, seen["oob"]
    assert seen["trap"][0] is Status.RUNTIME_FAILED, seen["trap"]
    assert seen["hang"][0] is Status.TIMEOUT, seen["hang"]
    assert seen["seed"][0] is Status.OK and seen["honest"][0] is Status.OK
    assert replaced >= 3
    assert f.best is not None and _kind(f.best.code) == "honest"
    assert f.status == "OK", f.message
    assert seed_after.ok and seed_after.samples, seed_after.message  # a fresh context
