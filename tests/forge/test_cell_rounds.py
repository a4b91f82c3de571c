"""A matrix cell as a tune space, the forge's rounds as the rounds sampler's plan, the cell's
objective on the host emulator, and resume after kill -9 with that plan."""

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
from kernforge.forge.cell_rounds import CellSpace, ForgeRounds
from kernforge.forge.cell_tune import CellObjective, tune_cell
from kernforge.forge.sessions import emulated_compiler, emulated_sessions
from kernforge.stencil import designs
from kernforge.stencil import matrix as mx
from kernforge.stencil.spec import Cell
from kernforge.tune import Budget

CELL = "star_1/32x16x16/fp32"


def synthetic(cs: CellSpace, calls: list[str] | None = None):
    """A time per operator from its key (deterministic, no GPU, no emulator)."""
    def evaluate(config: dict[str, Any]) -> Measurement:
        op = cs.operator(config)
        assert op is not None, config
        if calls is not None:
            calls.append(op.key)
        return Measurement(Status.OK, samples=(seconds(op.key),))
    return evaluate


def seconds(key: str) -> float:
    """planesweep fastest, then zmarch, ztile, naive; within a design, by the key's hash."""
    rank = {"planesweep": 1, "zmarch": 2, "ztile": 3}.get(key.split("[")[0], 4)
    return rank + zlib.crc32(key.encode()) % 997 / 997


@pytest.fixture(scope="module")
def cs() -> CellSpace:
    return CellSpace(Cell.parse(CELL))


def test_the_space_holds_every_design_and_its_knobs_from_the_design_modules(cs) -> None:
    cell = cs.cell
    space = cs.space
    assert space["design"].choices == tuple(mx.applicable(cell))
    base = cs.operator(space.baseline)
    assert base is not None and base.design == "naive"
    assert base.key == mx.build("naive", cell, mx.defaults("naive", cell)).key
    for d in cs.designs:
        for knob, name in cs.knobs[d].items():
            assert knob in mx.space(d, cell) and name == f"{d}.{knob}"
            assert space.conditions[name] == ("design", (d,))
            kind = "ordinal" if knob in designs.get(d).geometry else "categorical"
            assert space[name].kind == kind
    # a knob of another design does not change the point
    other = {**space.baseline, "zmarch.pf": 4}
    assert space.key(other) == space.key(space.baseline)
    assert space.check(space.baseline) is None


def test_a_configuration_its_design_refuses_breaks_the_builds_constraint(cs) -> None:
    refused = None
    for vx in cs.space["zmarch.vx"].values():
        for tx in cs.space["zmarch.tx"].values():
            config = {**cs.space.baseline, "design": "zmarch", "zmarch.vx": vx,
                      "zmarch.tx": tx, "zmarch.xs": 1, "zmarch.smem": 1}
            if cs.operator(config) is None:
                refused = config
    assert refused is not None
    assert cs.space.check(refused) == "violates builds"


def test_every_preset_has_its_configuration(cs) -> None:
    for d in cs.designs:
        for params in mx.presets(d, cs.cell):
            op = mx.build(d, cs.cell, params)
            assert op is not None
            config = cs.config_of(op)
            assert config is not None and cs.operator(config).key == op.key


def test_the_rounds_propose_what_the_forge_would_in_its_order(cs) -> None:
    calls: list[str] = []
    r = tune_cell(cs, sampler="rounds", budget=Budget(trials=40), evaluate=synthetic(cs, calls),
                  seed=0)
    assert r.evaluations == 40
    presets = [mx.build(d, cs.cell, p).key for d in cs.designs for p in mx.presets(d, cs.cell)]
    assert calls[0] == presets[-1] == "naive[block=(32, 8, 1)]"  # the baseline, trial 0
    assert calls[1:len(presets)] == presets[:-1]  # the design round: every design's presets
    best = min(calls[:len(presets)], key=seconds)
    design = best.split("[")[0]
    assert design == "planesweep"
    plan = ForgeRounds(cs)
    by_round: dict[str, list[str]] = {}
    for t in r.trials[len(presets):]:
        op = cs.operator(t.config)
        if t.evaluated:
            assert op.design == design  # rounds and TPE after them: the incumbent's design
    inc = cs.config_of(mx.from_key(cs.cell, best))
    first = next(n for n in plan.rounds()[1:] if plan.candidates(n, inc))
    by_round[first] = [cs.operator(c).key for c in plan.candidates(first, inc)]
    assert first in designs.ROUND_ORDER
    assert calls[len(presets):len(presets) + len(by_round[first])] == by_round[first]


CHILD = """
import os, signal, sys, zlib
from kernforge.core import Measurement, Status
from kernforge.forge.cell_rounds import CellSpace
from kernforge.forge.cell_tune import tune_cell
from kernforge.stencil.spec import Cell
from kernforge.tune import Budget
sys.path.insert(0, sys.argv[5])
from test_cell_rounds import seconds
cs = CellSpace(Cell.parse(sys.argv[1]))
count = 0
def evaluate(config):
    global count
    count += 1
    op = cs.operator(config)
    with open(sys.argv[3], "a") as f:
        f.write(op.key + "\\n")
    if count == int(sys.argv[4]):
        os.kill(os.getpid(), signal.SIGKILL)
    return Measurement(Status.OK, samples=(seconds(op.key),))
tune_cell(cs, sampler="rounds", budget=Budget(trials=30), evaluate=evaluate,
          storage=sys.argv[2], study_name="cell", seed=0)
"""


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
def test_resume_after_kill_repeats_no_finished_trial_and_keeps_the_round(cs, tmp_path) -> None:
    log = tmp_path / "evaluated.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-c", CHILD, CELL, str(tmp_path), str(log), "8",
                           str(Path(__file__).parent)],
                          capture_output=True, timeout=300, check=False, env=env)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    first = log.read_text().splitlines()
    assert len(first) == 8  # seven finished, the eighth was running when killed
    calls: list[str] = []
    r = tune_cell(cs, sampler="rounds", budget=Budget(trials=20), evaluate=synthetic(cs, calls),
                  storage=tmp_path, study_name="cell", seed=0)
    assert not set(first) & set(calls)  # neither finished ones nor the quarantined one
    assert len(calls) == 20 - 8 and r.evaluations == 20
    # the same run uninterrupted evaluates the same operators, the killed one aside
    whole: list[str] = []
    tune_cell(cs, sampler="rounds", budget=Budget(trials=20), evaluate=synthetic(cs, whole),
              seed=0)
    assert first[:7] == whole[:7]
    assert calls[:5] == [k for k in whole[7:] if k != first[7]][:5]
    killed = [t for t in r.trials if t.evaluated and t.status is Status.RUNTIME_FAILED]
    assert [cs.operator(t.config).key for t in killed] == [first[7]]  # quarantined


def test_the_objective_checks_with_the_oracle_and_times_on_the_emulator(cs) -> None:
    r = tune_cell(cs, sampler="rounds", budget=Budget(trials=2), backend="cpu-emulator",
                  seed=0)
    assert [t.status for t in r.trials] == [Status.OK, Status.OK]
    assert all("error" in t.message and t.median > 0 for t in r.trials)


def test_a_wrong_operator_is_a_wrong_result(cs) -> None:
    """The operator of a radius-2 stencil on this radius-1 cell's arrays: the oracle sees it."""
    wrong = mx.build("naive", Cell.parse("star_2/32x16x16/fp32"), {})
    assert wrong is not None
    with emulated_sessions(cs.cell) as session:
        objective = CellObjective(cs, session, lambda ops: emulated_compiler([wrong]))
        m = objective(dict(cs.space.baseline))
    assert m.status is Status.WRONG_RESULT and "oracle error" in m.message


@pytest.mark.gpu
@pytest.mark.parametrize("sampler", ["rounds", "tpe", "random"])
def test_a_cell_tunes_on_the_gpu(sampler) -> None:
    """The cuda backend's objective: every evaluated operator passes the oracle and is timed."""
    cs = CellSpace(Cell.parse("star_1/256x256x256/fp32"))
    r = tune_cell(cs, sampler=sampler, budget=Budget(trials=8), backend="cuda", seed=0)
    assert r.evaluations == 8 and r.baseline is not None and r.baseline.ok
    assert all(t.status is Status.OK and t.median > 0 for t in r.trials if t.evaluated), \
        [(t.status, t.message) for t in r.trials if not t.ok]
    assert r.best is not None and r.best.median <= r.baseline.median
