"""The sampler conformance suite: every sampler in the registry passes these tests.

Use it from a test module::

    from kernforge.testing.samplers import SamplerConformance

    class TestSamplerConformance(SamplerConformance):
        pass

The ``sampler`` fixture is parametrized over ``SAMPLERS.names()``. The objective is a
synthetic, deterministic bowl over (block_x, block_y, unroll) -- 280 points, 232 valid -- so
the suite needs no GPU and runs in seconds. A sampler with ``visits_all`` must find the exact
optimum; any other must get within 10% of it in 60 evaluations.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..core import KernelRuntimeError, Measurement, Status
from ..tune import (
    SAMPLERS,
    Budget,
    Dimension,
    Predicate,
    ProductAtMost,
    SearchSpace,
    TuneResult,
    tune,
)

BLOCK_X = (8, 16, 32, 64, 128, 256, 512)
BLOCK_Y = (1, 2, 4, 8, 16)


def bowl_space(max_threads: int = 1024) -> SearchSpace:
    """(launch.block_x, launch.block_y, opt.unroll), threads per block <= ``max_threads``."""
    return SearchSpace(
        [Dimension.ordinal("launch.block_x", BLOCK_X),
         Dimension.ordinal("launch.block_y", BLOCK_Y),
         Dimension.integer("opt.unroll", 1, 8)],
        [ProductAtMost(("launch.block_x", "launch.block_y"), max_threads)],
        baseline={"launch.block_x": 32, "launch.block_y": 1, "opt.unroll": 1})


def bowl_seconds(config: dict[str, Any]) -> float:
    """A smooth bowl with its minimum at block (128, 2), unroll 5."""
    x = math.log2(config["launch.block_x"]) - 7
    y = math.log2(config["launch.block_y"]) - 1
    u = config["opt.unroll"] - 5
    return 1e-3 * (1.0 + 0.035 * x * x + 0.05 * y * y + 0.012 * u * u + 0.01 * x * y)


def bowl_evaluate(config: dict[str, Any]) -> Measurement:
    return Measurement(Status.OK, samples=(bowl_seconds(config),) * 3)


def bowl_optimum(space: SearchSpace | None = None) -> float:
    return min(bowl_seconds(p) for p in (space or bowl_space()).valid_points())


def recording(calls: list[dict[str, Any]],
              evaluate: Callable[[dict[str, Any]], Measurement] = bowl_evaluate
              ) -> Callable[[dict[str, Any]], Measurement]:
    """An evaluator that appends every configuration it is called with to ``calls``."""
    def wrapped(config: dict[str, Any]) -> Measurement:
        calls.append(dict(config))
        return evaluate(config)
    return wrapped


def crash_child(sampler: str, storage: str, log: str, kill_at: int) -> None:
    """Run a study that SIGKILLs its own process during evaluation number ``kill_at``; every
    evaluated configuration is appended to ``log`` (one JSON line) before it is evaluated."""
    count = 0

    def evaluate(config: dict[str, Any]) -> Measurement:
        nonlocal count
        count += 1
        with open(log, "a") as f:
            f.write(json.dumps(config) + "\n")
        if count == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return bowl_evaluate(config)

    tune(bowl_space(), evaluate, sampler=sampler, budget=Budget(trials=40), storage=storage,
         study_name="crash", seed=0)


def _keys(space: SearchSpace, configs: list[dict[str, Any]]) -> list[str]:
    return [space.key(space.validate(c)) for c in configs]


class SamplerConformance:
    """Subclass in a test module to run the suite over every registered sampler."""

    @pytest.fixture(params=SAMPLERS.names())
    def sampler(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    def test_respects_trial_budget(self, sampler: str) -> None:
        calls: list[dict[str, Any]] = []
        r = tune(bowl_space(), recording(calls), sampler=sampler, budget=Budget(trials=15),
                 seed=0)
        assert len(calls) == r.evaluations == 15
        assert sum(t.evaluated for t in r.trials) == 15
        assert r.stop_reason == "trials"

    def test_respects_patience(self, sampler: str) -> None:
        calls: list[dict[str, Any]] = []
        flat = recording(calls, lambda c: Measurement(Status.OK, samples=(1.0,)))
        r = tune(bowl_space(), flat, sampler=sampler, budget=Budget(trials=50, patience=5),
                 seed=0)
        assert r.stop_reason == "patience"
        assert len(calls) == 6  # the baseline, then five without improvement

    def test_baseline_is_trial_zero(self, sampler: str, tmp_path: Path) -> None:
        space = bowl_space()
        calls: list[dict[str, Any]] = []
        r = tune(space, recording(calls), sampler=sampler, budget=Budget(trials=3),
                 storage=tmp_path, seed=0)
        first = r.trials[0]
        assert first.number == 0 and first.evaluated
        assert first.config == space.baseline == calls[0]
        assert r.baseline is first

    def test_never_evaluates_a_config_violating_a_constraint(self, sampler: str) -> None:
        odd = Predicate("even_unroll_only_with_wide_blocks",
                        lambda c: c["opt.unroll"] % 2 == 1 or c["launch.block_x"] >= 64)
        base = bowl_space(max_threads=256)
        space = SearchSpace(base.dimensions, (*base.constraints, odd), base.baseline)

        def evaluate(config: dict[str, Any]) -> Measurement:
            assert space.check(config) is None, config
            return bowl_evaluate(config)

        r = tune(space, evaluate, sampler=sampler, budget=Budget(trials=40), seed=0)
        assert r.evaluations == 40
        for t in r.trials:
            if space.check(t.config) is not None:
                assert not t.evaluated and t.status is Status.INVALID_CONFIG
                assert t.median is None and "constraint" in t.message

    def test_never_evaluates_the_same_config_twice(self, sampler: str) -> None:
        space = SearchSpace([Dimension.ordinal("launch.block_x", (32, 64, 128)),
                             Dimension.integer("opt.unroll", 1, 4)])
        calls: list[dict[str, Any]] = []
        objective = recording(calls, lambda c: Measurement(
            Status.OK, samples=(c["launch.block_x"] * abs(c["opt.unroll"] - 3) + 1.0,)))
        r = tune(space, objective, sampler=sampler, budget=Budget(trials=40), seed=0)
        keys = _keys(space, calls)
        assert len(keys) == len(set(keys)) <= 12
        assert r.stop_reason in ("exhausted", "stalled")
        for t in r.trials:
            assert t.evaluated or t.cached
            if t.cached:
                assert space.key(t.config) in keys and t.seconds == 0.0

    def test_failures_keep_their_status(self, sampler: str) -> None:
        def evaluate(config: dict[str, Any]) -> Measurement:
            if config["opt.unroll"] == 3:
                return Measurement(Status.COMPILE_FAILED, "ptxas: too many registers")
            if config["opt.unroll"] == 4:
                raise KernelRuntimeError("illegal memory access")
            return bowl_evaluate(config)

        r = tune(bowl_space(), evaluate, sampler=sampler, budget=Budget(trials=60), seed=0)
        seen = set()
        for t in r.trials:
            if t.config["opt.unroll"] in (3, 4) and t.origin != "invalid":
                expected = (Status.COMPILE_FAILED, "ptxas") if t.config["opt.unroll"] == 3 \
                    else (Status.RUNTIME_FAILED, "illegal memory")
                assert t.status is expected[0] and expected[1] in t.message
                assert t.median is None and not t.ok
                seen.add(t.status)
        assert seen == {Status.COMPILE_FAILED, Status.RUNTIME_FAILED}
        assert r.best is not None and r.best.ok

    def test_finds_the_optimum_of_a_synthetic_objective(self, sampler: str) -> None:
        space = bowl_space()
        best = bowl_optimum(space)
        if SAMPLERS.get(sampler).visits_all:
            r = tune(space, bowl_evaluate, sampler=sampler, budget=Budget(trials=None), seed=0)
            assert r.stop_reason == "exhausted"
            assert r.evaluations == sum(1 for _ in space.valid_points())
            assert r.best is not None and r.best.median == best
        else:
            r = tune(space, bowl_evaluate, sampler=sampler, budget=Budget(trials=60), seed=0)
            assert r.best is not None and r.best.median <= 1.10 * best

    @pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")
    def test_resume_after_sigkill_repeats_no_finished_trial(self, sampler: str,
                                                             tmp_path: Path) -> None:
        log = tmp_path / "evaluated.jsonl"
        code = (f"from kernforge.testing.samplers import crash_child; "
                f"crash_child({sampler!r}, {str(tmp_path)!r}, {str(log)!r}, 6)")
        proc = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True,
                              check=False)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
        first = [json.loads(line) for line in log.read_text().splitlines()]
        assert len(first) == 6  # five finished, the sixth was running when killed
        space = bowl_space()
        calls: list[dict[str, Any]] = []
        r: TuneResult = tune(space, recording(calls), sampler=sampler,
                             budget=Budget(trials=12), storage=tmp_path, study_name="crash",
                             seed=0)
        finished = set(_keys(space, first[:5]))
        assert not finished & set(_keys(space, calls))
        # the sixth was running at the kill: quarantined (RUNTIME_FAILED), never run again
        killed = _keys(space, first[5:])
        assert not set(killed) & set(_keys(space, calls))
        quarantined = [t for t in r.trials if space.key(t.config) in killed and t.evaluated]
        assert len(quarantined) == 1 and quarantined[0].status is Status.RUNTIME_FAILED
        assert "quarantined" in quarantined[0].measurement.message
        assert len(calls) == 12 - 6 and r.evaluations == 12
        assert [t.number for t in r.trials if t.evaluated][:5] == \
            [t.number for t in r.trials if t.evaluated and space.key(t.config) in finished]
