"""The forge's search over a lifted program's operators: the space the design modules declare,
the rounds (presets first), refused combinations never built, and on the host emulator a
search that keeps a valid candidate while one candidate fails to compile and another computes
wrong results; resume, after a kill -9 too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from kernforge.core import Measurement, Status
from kernforge.forge.program_space import DESIGN, ProgramSpace
from kernforge.forge.program_tune import HostEmulator, ProgramObjective, tune_program
from kernforge.stencil import emulate as em
from kernforge.stencil.program import Reduction, StencilProgram, program, tap
from kernforge.stencil.program import designs as pd
from kernforge.stencil.program.binding import Binding, Placement
from kernforge.stencil.program.codegen import Kernel
from kernforge.tune import Budget

needs_compiler = pytest.mark.skipif(not em.find_compiler(), reason="no host C++ compiler")


def jacobi(shape: tuple[int, int, int] = (20, 12, 1)) -> tuple[StencilProgram, Binding]:
    """2D Jacobi with its residual summed beside the grid (HeCBench jacobi's kernel)."""
    def u(dy: int, dx: int) -> Any:
        return tap("u", 0, dy, dx)
    p = program(2, "fp32", {"v": 0.25 * (u(0, 1) + u(0, -1) + u(1, 0) + u(-1, 0))},
                reductions=[Reduction("q", "sumsq", tap("v") - tap("u"), accumulate=True)])
    return p, Binding(shape, {"u": Placement(0), "v": Placement(1)}, {"q": 2})


def seconds(key: str) -> float:
    """A time per operator from its key: tiles 128 wide first (the rounds then reach blocks
    of too many threads), other tiles, plain; otherwise by the key's hash."""
    base = 1.0 if "tx=128" in key else 1.5 if key.startswith("tiled") else 2.0
    return base + zlib.crc32(key.encode()) / 2 ** 34


def synthetic(ps: ProgramSpace, calls: list[str]) -> Any:
    def evaluate(config: dict[str, Any]) -> Measurement:
        assert ps.refusal(config) is None, config  # the tuner never asks for a refused one
        key = ps.kernel(config).key
        calls.append(key)
        return Measurement(Status.OK, samples=(seconds(key),))
    return evaluate


def test_the_space_is_what_the_design_modules_declare() -> None:
    p, b = jacobi()
    ps = ProgramSpace(p, b)
    assert ps.space[DESIGN].choices == tuple(pd.spaces(p))
    for design, knobs in pd.spaces(p).items():
        for knob, values in knobs.items():
            assert ps.space[f"{design}.{knob}"].choices == tuple(sorted(values))
    keys = [ps.kernel(c).key for c in ps.preset_configs()]
    want = [pd.generate(d, p, b, k).key for d, k in pd.presets(p)]
    assert keys == list(dict.fromkeys(want))
    assert ps.space.baseline[DESIGN] == "plain" and ps.study_name.endswith("-20x12x1-fp32")


def test_the_rounds_start_with_the_presets_and_never_evaluate_a_refused_one() -> None:
    p, b = jacobi()
    ps = ProgramSpace(p, b)
    calls: list[str] = []
    r = tune_program(ps, budget=Budget(trials=40), evaluate=synthetic(ps, calls))
    presets = [ps.kernel(c).key for c in ps.preset_configs()]
    assert calls[0] == next(k for k in presets if k.startswith("plain"))  # the baseline
    assert calls[1:len(presets)] == [k for k in presets if k != calls[0]]
    assert len(calls) == 40 and len(set(calls)) == 40
    invalid = [t for t in r.trials if t.status is Status.INVALID_CONFIG]
    assert invalid and all(t.origin == "invalid" and not t.evaluated for t in invalid)
    assert all("refuses it" in t.measurement.message for t in invalid)
    assert any("1024 threads" in t.measurement.message for t in invalid)
    best = r.best_config
    assert best is not None and ps.kernel(best).key == min(calls, key=seconds)


class Faulty(HostEmulator):
    """The host emulator, except that one operator's source does not compile and another's
    stores 1.5 times its formula; every kernel built is noted."""

    def __init__(self, broken: str = "", wrong: str = "") -> None:
        self.broken, self.wrong = broken, wrong
        self.built: list[str] = []

    def source(self, k: Kernel) -> str:
        self.built.append(k.key)
        src = super().source(k)
        if k.key == self.broken:
            return src + "\nthis is not C++;\n"
        if k.key == self.wrong:
            assert "f_v[i] = kf_st(kf_o0);" in src
            return src.replace("f_v[i] = kf_st(kf_o0);", "f_v[i] = kf_st(kf_o0 * 1.5f);")
        return src


@needs_compiler
def test_a_refused_combination_is_not_built() -> None:
    p, b = jacobi()
    ps = ProgramSpace(p, b)
    backend = Faulty()
    config = ps.config("tiled", {"tx": 128, "ty": 32})
    assert config is not None and ps.space.check(config) is not None
    m = ProgramObjective(ps, backend)(config)
    assert m.status is Status.INVALID_CONFIG and "1024 threads" in m.message
    assert backend.built == []


@needs_compiler
def test_a_search_on_the_emulator_survives_bad_candidates_and_resumes(tmp_path: Path) -> None:
    p, b = jacobi()
    ps = ProgramSpace(p, b)
    presets = [ps.kernel(c).key for c in ps.preset_configs()]
    backend = Faulty(broken=presets[1], wrong=presets[2])
    r = tune_program(ps, budget=Budget(trials=5), backend=backend, storage=tmp_path, repeat=1)
    by_key = {ps.kernel(t.config).key: t for t in r.trials if t.evaluated}
    assert len(by_key) == 5 and r.evaluations == 5
    assert by_key[presets[1]].status is Status.COMPILE_FAILED
    assert "compiler rejected" in by_key[presets[1]].measurement.message
    assert by_key[presets[2]].status is Status.WRONG_RESULT
    assert "against the oracle" in by_key[presets[2]].measurement.message
    ok = [k for k, t in by_key.items() if t.status is Status.OK]
    assert len(ok) == 3 and presets[0] in ok
    assert r.best_trial is not None and ps.kernel(r.best_trial.config).key in ok
    # resumed: the finished trials are not evaluated again
    again = Faulty(broken=presets[1], wrong=presets[2])
    r2 = tune_program(ProgramSpace(p, b), budget=Budget(trials=7), backend=again,
                      storage=tmp_path, repeat=1)
    assert r2.evaluations == 7 and len(again.built) == 2
    assert not set(again.built) & set(by_key)


CHILD = """
import os, signal, sys, zlib
from kernforge.core import Measurement, Status
from kernforge.forge.program_space import ProgramSpace
from kernforge.forge.program_tune import tune_program
from kernforge.tune import Budget
sys.path.insert(0, sys.argv[4])
from test_program_search import jacobi, seconds
p, b = jacobi()
ps = ProgramSpace(p, b)
count = 0
def evaluate(config):
    global count
    count += 1
    key = ps.kernel(config).key
    with open(sys.argv[2], "a") as f:
        f.write(key + "\\n")
    if count == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return Measurement(Status.OK, samples=(seconds(key),))
tune_program(ps, budget=Budget(trials=30), evaluate=evaluate, storage=sys.argv[1])
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_resume_after_kill_repeats_no_finished_trial(tmp_path: Path) -> None:
    log = tmp_path / "evaluated.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), str(log), "8",
                           str(Path(__file__).parent)],
                          capture_output=True, timeout=300, check=False, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    first = log.read_text().splitlines()
    assert len(first) == 8  # seven finished, the eighth was running when killed
    p, b = jacobi()
    ps = ProgramSpace(p, b)
    calls: list[str] = []
    r = tune_program(ps, budget=Budget(trials=20), evaluate=synthetic(ps, calls),
                     storage=tmp_path)
    assert not set(first) & set(calls)  # neither finished ones nor the quarantined one
    assert len(calls) == 20 - 8 and r.evaluations == 20
    killed = [t for t in r.trials if t.evaluated and t.status is Status.RUNTIME_FAILED]
    assert [ps.kernel(t.config).key for t in killed] == [first[7]]  # quarantined
