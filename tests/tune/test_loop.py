"""The tuning loop: budget, cache, constraint checks, banned launch shapes, parallel
evaluators, storage and resume."""

from __future__ import annotations

import json
import threading
import time
from typing import Any, ClassVar

import optuna
import pytest

from kernforge.core import (
    BackendUnavailableError,
    ConfigError,
    LaunchError,
    Measurement,
    PluginNotFoundError,
    Status,
)
from kernforge.testing.samplers import bowl_evaluate, bowl_space, recording
from kernforge.tune import (
    SAMPLERS,
    Budget,
    Dimension,
    Sampler,
    SearchSpace,
    Trial,
    TrialRecord,
    tune,
)


def ok(seconds: float) -> Measurement:
    return Measurement(Status.OK, samples=(seconds,))


def small_space() -> SearchSpace:
    return SearchSpace([Dimension.categorical("launch.block", [(128, 1, 1), (1024, 1, 1)]),
                        Dimension.integer("opt.unroll", 1, 4)])


def test_budget_validation() -> None:
    for bad in ({"trials": 0}, {"patience": -1}, {"seconds": 0.0}, {"max_skips": 0}):
        with pytest.raises(ConfigError):
            Budget(**bad)
    with pytest.raises(PluginNotFoundError, match="no sampler named 'nope'"):
        tune(small_space(), bowl_evaluate, sampler="nope")
    with pytest.raises(ConfigError, match="needs an evaluator"):
        tune(small_space(), [])


def test_seconds_budget_stops_asking_after_the_deadline() -> None:
    def slow(config: dict[str, Any]) -> Measurement:
        time.sleep(0.03)
        return bowl_evaluate(config)

    r = tune(bowl_space(), slow, sampler="random", budget=Budget(trials=None, seconds=0.2),
             seed=0)
    assert r.stop_reason == "seconds"
    # each evaluation sleeps 0.03 s, so at most 0.2 / 0.03 + 1 fit however busy the machine;
    # how many do fit depends on its load, so only "at least one" is certain
    assert 1 <= r.evaluations <= 8


def test_patience_counts_evaluations_since_the_last_improvement() -> None:
    times = iter([5.0, 4.0, 3.0, 3.5, 2.0] + [9.0] * 100)
    r = tune(bowl_space(), lambda c: ok(next(times)), sampler="exhaustive",
             budget=Budget(trials=100, patience=3), seed=0)
    assert r.stop_reason == "patience" and r.evaluations == 5 + 3
    assert r.best is not None and r.best.median == 2.0 and r.best_trial is not None
    assert r.best_trial.number == 4


def test_failed_launch_shapes_are_banned(tmp_path: Any) -> None:
    calls: list[dict[str, Any]] = []

    def evaluate(config: dict[str, Any]) -> Measurement:
        if config["launch.block"] == (1024, 1, 1):
            raise LaunchError("too many resources requested for launch")
        return ok(1.0 / config["opt.unroll"])

    r = tune(small_space(), recording(calls, evaluate), sampler="exhaustive",
             budget=Budget(trials=None), storage=tmp_path, seed=0)
    assert [c["launch.block"] for c in calls] == [(128, 1, 1)] * 4 + [(1024, 1, 1)]
    banned = [t for t in r.trials if t.origin == "banned"]
    assert len(banned) == 3 and r.stop_reason == "exhausted"
    for t in banned:
        assert t.status is Status.LAUNCH_FAILED and not t.evaluated
        assert "banned" in t.message and "trial 4" in t.message
    failed = r.trials[4]
    assert failed.status is Status.LAUNCH_FAILED and "too many resources" in failed.message


@pytest.mark.slow  # three studies on disk; test_resume_continues_... is the quick resume
def test_bans_survive_a_resume(tmp_path: Any) -> None:
    def evaluate(config: dict[str, Any]) -> Measurement:
        if config["launch.block"] == (1024, 1, 1):
            return Measurement(Status.LAUNCH_FAILED, "no")
        return ok(1.0)

    tune(small_space(), evaluate, sampler="exhaustive", budget=Budget(trials=5),
         storage=tmp_path)
    calls: list[dict[str, Any]] = []
    r = tune(small_space(), recording(calls, evaluate), sampler="exhaustive",
             budget=Budget(trials=None), storage=tmp_path)
    assert calls == [] and [t.origin for t in r.trials[5:]] == ["banned"] * 3


def test_no_launch_dimensions_means_nothing_is_banned() -> None:
    space = SearchSpace([Dimension.integer("opt.unroll", 1, 4)])
    r = tune(space, lambda c: Measurement(Status.LAUNCH_FAILED, "x"), sampler="exhaustive",
             budget=Budget(trials=None))
    assert r.evaluations == 4 and r.best is None and r.best_config is None


def test_duplicates_are_answered_from_the_cache() -> None:
    space = SearchSpace([Dimension.ordinal("def.T", [1, 2]), Dimension.boolean("def.U")])
    calls: list[dict[str, Any]] = []
    r = tune(space, recording(calls, lambda c: ok(c["def.T"] + c["def.U"])), sampler="random",
             budget=Budget(trials=10, max_skips=15), seed=0)
    assert len(calls) == r.evaluations == 4 and r.stop_reason == "stalled"
    first = {space.key(t.config): t for t in r.trials if t.evaluated}
    cached = [t for t in r.trials if t.cached]
    assert len(cached) >= 15
    for t in cached:
        original = first[space.key(t.config)]
        assert t.median == original.median and t.status is original.status
        assert t.seconds == 0.0 and original.number < t.number


def test_parallel_evaluators_all_work_at_once() -> None:
    lock = threading.Lock()
    running, peak, used = [0], [0], set()

    def evaluator(ident: int) -> Any:
        def evaluate(config: dict[str, Any]) -> Measurement:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
                used.add((ident, threading.current_thread().name))
            time.sleep(0.03)
            with lock:
                running[0] -= 1
            return bowl_evaluate(config)
        return evaluate

    r = tune(bowl_space(), [evaluator(0), evaluator(1)], sampler="tpe",
             budget=Budget(trials=12), seed=0)
    assert r.evaluations == 12 and peak[0] == 2
    assert {i for i, _ in used} == {0, 1} and len({n for _, n in used}) == 2
    evaluated = [bowl_space().key(t.config) for t in r.trials if t.evaluated]
    assert len(evaluated) == len(set(evaluated)) == 12


class Scripted(Sampler):
    """A sampler that proposes a fixed list of configurations (tests the loop alone)."""

    script: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, space: SearchSpace, **kw: Any) -> None:
        super().__init__(space, **kw)
        self.queue = list(self.script)
        self.count = 0

    def history(self) -> list[TrialRecord]:
        return []

    def ask(self) -> Trial | None:
        if not self.queue:
            return None
        self.count += 1
        return Trial(self.count - 1, self.space.validate(self.queue.pop(0)))

    def tell(self, trial: Trial, measurement: Measurement, *, origin: str = "evaluated",
             seconds: float = 0.0) -> TrialRecord:
        return TrialRecord(trial.number, trial.config, measurement, origin, seconds)


def test_a_duplicate_of_a_config_in_flight_waits_for_its_result(monkeypatch: Any) -> None:
    monkeypatch.setitem(SAMPLERS._targets, "scripted", f"{__name__}:Scripted")
    monkeypatch.setattr(SAMPLERS, "_loaded", dict(SAMPLERS._loaded))
    a = {"launch.block": (128, 1, 1), "opt.unroll": 1}
    b = {"launch.block": (128, 1, 1), "opt.unroll": 2}
    monkeypatch.setattr(Scripted, "script", [a, a, b])
    calls: list[dict[str, Any]] = []

    def slow(config: dict[str, Any]) -> Measurement:
        calls.append(config)
        time.sleep(0.05 if config == a else 0.0)
        return ok(config["opt.unroll"])

    seen: list[TrialRecord] = []
    r = tune(small_space(), [slow, slow], sampler="scripted", budget=Budget(trials=None),
             on_trial=seen.append)
    assert sorted(c["opt.unroll"] for c in calls) == [1, 2]
    assert [(t.number, t.origin, t.median) for t in r.trials] == \
        [(0, "evaluated", 1.0), (1, "cached", 1.0), (2, "evaluated", 2.0)]
    assert sorted(t.number for t in seen) == [0, 1, 2]


def test_failures_are_stored_as_inf_with_their_status(tmp_path: Any) -> None:
    space = small_space()

    def evaluate(config: dict[str, Any]) -> Measurement:
        if config["opt.unroll"] == 2:
            return Measurement(Status.WRONG_RESULT, "out[3] differs")
        return ok(0.5)

    r = tune(space, evaluate, sampler="exhaustive", budget=Budget(trials=3), storage=tmp_path,
             study_name="s")
    assert [t.status for t in r.trials] == [Status.OK, Status.WRONG_RESULT, Status.OK]
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 'study.db'}")
    failed = study.trials[1]
    assert failed.value == float("inf")
    assert failed.user_attrs["kernforge.status"] == "WRONG_RESULT"
    assert failed.user_attrs["kernforge.median"] is None
    assert failed.user_attrs["kernforge.config"] == {"launch.block": [128, 1, 1],
                                                     "opt.unroll": 2}
    assert study.trials[0].value == 0.5
    saved = json.loads((tmp_path / "s.space.json").read_text())
    assert SearchSpace.from_json(saved) == space


def test_resume_continues_without_evaluating_finished_trials(tmp_path: Any) -> None:
    db = tmp_path / "tuning.db"
    first = tune(bowl_space(), bowl_evaluate, sampler="tpe", budget=Budget(trials=5),
                 storage=db, seed=3)
    calls: list[dict[str, Any]] = []
    r = tune(bowl_space(), recording(calls), sampler="tpe", budget=Budget(trials=8),
             storage=db, seed=3)
    assert len(calls) == 3 and r.evaluations == 8
    assert r.trials[:len(first.trials)] == first.trials
    again = tune(bowl_space(), recording(calls), sampler="tpe", budget=Budget(trials=8),
                 storage=db, seed=3)
    assert len(calls) == 3 and again.stop_reason == "trials"
    assert again.best_trial == r.best_trial and again.baseline == first.trials[0]


def test_resume_with_another_space_is_refused(tmp_path: Any) -> None:
    tune(small_space(), bowl_evaluate_small, sampler="random", budget=Budget(trials=2),
         storage=tmp_path)
    other = SearchSpace([Dimension.integer("opt.unroll", 1, 5)])
    with pytest.raises(ConfigError, match="another search space"):
        tune(other, bowl_evaluate_small, sampler="random", storage=tmp_path)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_resume_of_a_damaged_study_database_is_a_config_error(tmp_path: Any,
                                                                damage: str) -> None:
    tune(small_space(), bowl_evaluate_small, sampler="tpe", budget=Budget(trials=2),
         storage=tmp_path)
    db = tmp_path / "study.db"
    data = db.read_bytes()
    db.write_bytes(bytes(range(256)) * 32 if damage == "garbage" else data[:len(data) // 2])
    with pytest.raises(ConfigError, match=r"study\.db: not a usable study database") as exc:
        tune(small_space(), bowl_evaluate_small, sampler="tpe", storage=tmp_path)
    assert str(db.resolve()) in exc.value.message and "move the file away" in exc.value.hint


def bowl_evaluate_small(config: dict[str, Any]) -> Measurement:
    return ok(float(config["opt.unroll"]))


def test_errors_without_a_status_and_bad_returns_propagate() -> None:
    def unavailable(config: dict[str, Any]) -> Measurement:
        raise BackendUnavailableError("no GPU")

    with pytest.raises(BackendUnavailableError):
        tune(small_space(), unavailable, sampler="random", budget=Budget(trials=2))
    with pytest.raises(TypeError, match="must return a kernforge Measurement"):
        tune(small_space(), lambda c: 1.0, sampler="random")  # type: ignore[arg-type,return-value]


_KILLED_CHILD = """
import os, signal, sys
from kernforge.testing.samplers import bowl_evaluate, bowl_space
from kernforge.tune import Budget, tune
calls = []
def evaluate(config):
    calls.append(config)
    if len(calls) == 4:  # the candidate takes the whole process down mid-evaluation
        os.kill(os.getpid(), signal.SIGKILL)
    return bowl_evaluate(config)
tune(bowl_space(), evaluate, sampler="tpe", budget=Budget(trials=8), storage=sys.argv[1], seed=3)
"""


def test_kill9_during_an_evaluation_then_resume_quarantines_it(tmp_path: Any) -> None:
    import subprocess
    import sys

    db = tmp_path / "tuning.db"
    child = subprocess.run([sys.executable, "-c", _KILLED_CHILD, str(db)], check=False)
    assert child.returncode == -9
    calls: list[dict[str, Any]] = []
    r = tune(bowl_space(), recording(calls), sampler="tpe", budget=Budget(trials=8),
             storage=db, seed=3)
    quarantined = [t for t in r.trials if "quarantined" in t.measurement.message]
    assert len(quarantined) == 1
    q = quarantined[0]
    assert q.status is Status.RUNTIME_FAILED and q.evaluated
    before = [t.config for t in r.trials if t.evaluated and t.number < q.number]
    assert len(before) == 3  # finished before the kill
    assert not [c for c in calls if c in before or c == q.config]  # none of them run again
    assert len(calls) == 4 and r.evaluations == 8  # 3 before the kill, 1 quarantined, 4 new


@pytest.mark.parametrize("sampler", [pytest.param("tpe", marks=pytest.mark.slow), "exhaustive"])
def test_kill9_during_the_baseline_then_resume_evaluates_it_again(tmp_path: Any,
                                                                   sampler: str) -> None:
    """The baseline is the study's reference (a result without it has no speedup): the run
    killed while it was evaluated asks it again on resume instead of quarantining it."""
    import subprocess
    import sys

    db = tmp_path / "tuning.db"
    script = _KILLED_CHILD.replace("len(calls) == 4", "len(calls) == 1").replace(
        'sampler="tpe"', f'sampler="{sampler}"')
    child = subprocess.run([sys.executable, "-c", script, str(db)], check=False)
    assert child.returncode == -9
    calls: list[dict[str, Any]] = []
    r = tune(bowl_space(), recording(calls), sampler=sampler, budget=Budget(trials=4),
             storage=db, seed=3)
    assert not [t for t in r.trials if "quarantined" in t.measurement.message]
    assert r.baseline is not None and r.baseline.status is Status.OK
    assert calls[0] == bowl_space().baseline and len(calls) == 4 == r.evaluations
    assert [t.config for t in r.trials].count(bowl_space().baseline) == 1


@pytest.mark.parametrize("sampler", [pytest.param("tpe", marks=pytest.mark.slow), "exhaustive"])
def test_an_isolated_study_evaluates_the_interrupted_trial_again(tmp_path: Any,
                                                                 sampler: str) -> None:
    """Evaluations in a child process (a native unit's) cannot take the run down: a trial
    left running was stopped by the run's end, so the resumed study evaluates it."""
    import subprocess
    import sys

    db = tmp_path / "tuning.db"
    script = _KILLED_CHILD.replace('sampler="tpe"', f'sampler="{sampler}"')
    child = subprocess.run([sys.executable, "-c", script, str(db)], check=False)
    assert child.returncode == -9
    calls: list[dict[str, Any]] = []
    r = tune(bowl_space(), recording(calls), sampler=sampler, budget=Budget(trials=8),
             storage=db, seed=3, isolated=True)
    assert not [t for t in r.trials if "quarantined" in t.measurement.message]
    assert r.evaluations == 8 and len(calls) == 5  # the interrupted one, then 4 new
    done = [t.config for t in r.trials if t.number < 3]  # finished before the kill
    assert len(done) == 3 and not [c for c in calls if c in done]  # not evaluated again
