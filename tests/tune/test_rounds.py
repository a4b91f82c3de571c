"""The rounds sampler's order and plans, and conditional dimensions of a search space.
(The conformance suite runs the rounds sampler too: budget, resume after kill -9, ...)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kernforge.core import ConfigError, Measurement, Status
from kernforge.testing.samplers import bowl_evaluate, bowl_optimum, bowl_space, recording
from kernforge.tune import Budget, Dimension, SearchSpace, tune
from kernforge.tune.samplers.rounds import PAIR_LIMIT, RoundPlan


def two_kinds() -> SearchSpace:
    """``kind`` a or b; ``a.n`` matters only for a, ``b.m`` only for b."""
    return SearchSpace([Dimension.categorical("kind", ["a", "b"]),
                        Dimension.integer("a.n", 1, 4), Dimension.ordinal("b.m", [8, 16, 32])],
                       conditions={"a.n": ("kind", ["a"]), "b.m": ("kind", ["b"])})


def test_an_inactive_dimension_does_not_change_the_point() -> None:
    space = two_kinds()
    assert space.key({"kind": "a", "a.n": 2, "b.m": 8}) == \
        space.key({"kind": "a", "a.n": 2, "b.m": 32})
    assert space.key({"kind": "a", "a.n": 2, "b.m": 8}) != \
        space.key({"kind": "a", "a.n": 3, "b.m": 8})
    assert space.key({"kind": "b", "a.n": 1, "b.m": 16}) == \
        space.key({"kind": "b", "a.n": 4, "b.m": 16})
    points = list(space.valid_points())
    assert len(points) == 4 + 3  # each point once: a.n for a, b.m for b
    assert len({space.key(p) for p in points}) == len(points)


def test_conditions_survive_the_space_file_and_are_checked() -> None:
    space = two_kinds()
    data = space.to_json()
    assert data["conditions"] == {"a.n": {"when": "kind", "in": ["a"]},
                                  "b.m": {"when": "kind", "in": ["b"]}}
    assert SearchSpace.from_mapping(data) == space
    assert "conditions" not in bowl_space().to_json()  # spaces without any read as before
    with pytest.raises(ConfigError, match="never takes"):
        SearchSpace(space.dimensions, conditions={"a.n": ("kind", ["c"])})
    with pytest.raises(ConfigError, match="unknown dimension"):
        SearchSpace(space.dimensions, conditions={"a.n": ("sort", ["a"])})
    with pytest.raises(ConfigError, match="conditional"):
        SearchSpace(space.dimensions, conditions={"a.n": ("b.m", [8]), "b.m": ("kind", ["b"])})
    with pytest.raises(ConfigError, match="when, in"):
        SearchSpace.from_mapping({**data, "conditions": {"a.n": {"if": "kind"}}})


def test_the_tuner_answers_a_point_that_differs_only_where_inactive_from_its_cache() -> None:
    calls: list[dict[str, Any]] = []
    r = tune(two_kinds(), recording(calls, lambda c: Measurement(
        Status.OK, samples=(float(c["a.n"] if c["kind"] == "a" else c["b.m"]),))),
        sampler="random", budget=Budget(trials=50), seed=0)
    assert r.stop_reason in ("exhausted", "stalled") and len(calls) <= 7
    assert r.best_config is not None and r.best_config["kind"] == "a" \
        and r.best_config["a.n"] == 1


def test_the_default_plan_moves_one_dimension_at_a_time_from_the_incumbent() -> None:
    space = bowl_space()
    calls: list[dict[str, Any]] = []
    r = tune(space, recording(calls), sampler="rounds", budget=Budget(trials=17), seed=0)
    assert calls[0] == space.baseline
    x_round = calls[1:7]  # every other block_x, the rest as the baseline
    assert [c["launch.block_x"] for c in x_round] == [8, 16, 64, 128, 256, 512]
    assert all(c["launch.block_y"] == 1 and c["opt.unroll"] == 1 for c in x_round)
    y_round = calls[7:10]  # from the incumbent of that time: block_x 128 is the bowl's best
    assert [c["launch.block_y"] for c in y_round] == [2, 4, 8]  # 128 x 16 breaks a constraint
    assert all(c["launch.block_x"] == 128 and c["opt.unroll"] == 1 for c in y_round)
    assert [c["opt.unroll"] for c in calls[10:17]] == [2, 3, 4, 5, 6, 7, 8]
    assert all(c["launch.block_y"] == 2 for c in calls[10:17])
    assert r.best is not None and r.best.median == bowl_optimum(space)


class _Plan(RoundPlan):
    """Two starting points, a round over b.m, TPE with ``kind`` held."""

    def rounds(self) -> Sequence[str]:
        return ("start", "b.m")

    def candidates(self, name: str, incumbent: dict[str, Any]) -> list[dict[str, Any]]:
        if name == "start":
            return [{**incumbent, "kind": "b", "b.m": 8}, {**incumbent, "kind": "b", "b.m": 32}]
        return [{**incumbent, "b.m": m} for m in (8, 16, 32)]

    def fixed(self, incumbent: dict[str, Any]) -> Sequence[str]:
        return ("kind",)


@pytest.mark.slow  # twelve trials on disk; the default plan (above) is the quick test
def test_a_plan_gives_the_rounds_and_what_tpe_holds(tmp_path) -> None:
    space = SearchSpace([Dimension.categorical("kind", ["a", "b"]),
                         Dimension.integer("a.n", 1, 40), Dimension.integer("b.m", 1, 40)],
                        conditions={"a.n": ("kind", ["a"]), "b.m": ("kind", ["b"])})

    def seconds(c: dict[str, Any]) -> Measurement:  # b is better, b.m near 20 best
        t = 1.0 + abs(c["a.n"] - 20) / 10 if c["kind"] == "a" else 0.5 + abs(c["b.m"] - 20) / 40
        return Measurement(Status.OK, samples=(t,))

    calls: list[dict[str, Any]] = []
    r = tune(space, recording(calls, seconds), sampler="rounds", budget=Budget(trials=12),
             storage=tmp_path, seed=0, sampler_options={"plan": _Plan()})
    assert [(c["kind"], c["b.m"]) for c in calls[1:4]] == [("b", 8), ("b", 32), ("b", 16)]
    assert all(c["kind"] == "b" for c in calls[1:])  # TPE kept the incumbent's kind
    names = [t.round_name for t in _stored_rounds(tmp_path)]
    assert names[:4] == [None, "start", "start", "b.m"] and set(names[4:]) == {"tpe"}
    assert r.evaluations == 12


class _Stored:
    def __init__(self, attrs: dict[str, Any]) -> None:
        self.round_name = attrs.get("kernforge.round_name")


def _stored_rounds(run_dir) -> list[_Stored]:
    import optuna

    study = optuna.load_study(study_name="kernforge", storage=f"sqlite:///{run_dir}/study.db")
    return [_Stored(t.user_attrs) for t in sorted(study.trials, key=lambda t: t.number)
            if t.user_attrs.get("kernforge.origin") == "evaluated"]


def test_the_pair_round_changes_two_dimensions() -> None:
    space = bowl_space()
    calls: list[dict[str, Any]] = []
    flat = recording(calls, lambda c: Measurement(Status.OK, samples=(1.0,)))
    r = tune(space, flat, sampler="rounds", budget=Budget(trials=1 + 6 + 4 + 7 + 30), seed=0)
    pairs = calls[18:]  # the pair round (at most 5 of all pairs break the bowl's constraint)
    assert len(pairs) == 30 <= PAIR_LIMIT - 5 and r.evaluations == len(calls)
    for c in pairs:  # the incumbent stayed the baseline: nothing was faster
        assert sum(c[n] != space.baseline[n] for n in space.names) == 2
    assert bowl_evaluate(space.baseline).ok


def test_tpe_lets_go_of_what_it_holds_once_that_part_is_exhausted() -> None:
    space = SearchSpace([Dimension.categorical("kind", ["a", "b"]),
                         Dimension.integer("a.n", 1, 3), Dimension.integer("b.m", 1, 40)],
                        conditions={"a.n": ("kind", ["a"]), "b.m": ("kind", ["b"])})

    class HoldA(_Plan):
        def rounds(self) -> Sequence[str]:
            return ()

    calls: list[dict[str, Any]] = []
    r = tune(space, recording(calls, lambda c: Measurement(Status.OK, samples=(
        float(c["a.n"]) if c["kind"] == "a" else 10.0 + c["b.m"],))), sampler="rounds",
        budget=Budget(trials=8), seed=0, sampler_options={"plan": HoldA()})
    assert [c["kind"] for c in calls[:3]] == ["a", "a", "a"]  # all of a first
    assert r.evaluations == 8 and {c["kind"] for c in calls[3:]} == {"b"}
