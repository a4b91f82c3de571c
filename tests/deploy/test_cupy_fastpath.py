"""The CuPy hooks' routes (backends/cupy_hooks.py, deploy/fastpath.py): a launch whose raw CuPy
call was routed before runs the decision the event path would take. Varied launches (kernels,
problems, geometry given several ways, array dtypes viewed, non-contiguous and null arrays,
scalars of several types, aliasing, a tuned launch that fails, the spec swapped, an observer
for a while) run once through a deployment with routes and once through the same deployment
seen only through events; outputs, tuned launches, errors, events observed and the report must
be identical, and most launches must have been routed. On the CuPy stand-in
(kernforge.testing.fakecupy).
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from route_check import Counting, EventsOnly, run_both

from kernforge.backends import base, events
from kernforge.core import LaunchConfig
from kernforge.deploy import DeployEntry, Deployment, DeploySpec, entry_from_recording, fastpath
from kernforge.record import load_recording, record
from kernforge.testing.fakecupy import SRC, FakeCuda

F32 = np.float32


class Seen:
    """An observer keeping what each event says (kernel, geometry, arguments)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def before(self, event: Any) -> None:
        self.events.append((event.name, dict(event.variant.defines), event.launch,
                            tuple(np.asarray(a).tobytes() for a in event.args)))

    def after(self, token: Any, error: Any) -> None: ...


def _entry(tmp: Path, app: Any, **overrides: Any) -> DeployEntry:
    with record(tmp) as rec:
        app()
    r = load_recording(rec.paths[0])
    return entry_from_recording(r, r.variant.with_(**overrides), baseline_s=2.0, tuned_s=1.0,
                                speedup=2.0, speedup_ci=None)


def _kernels(cp: Any) -> dict[str, Any]:
    mod = cp.RawModule(code=SRC, name_expressions=["axpy<float>"])
    return {"scale": cp.RawKernel(SRC, "scale"), "scale2": cp.RawKernel(SRC, "scale"),
            "axpy": mod.get_function("axpy<float>")}


def _specs(cp: Any, tmp: Path) -> tuple[DeploySpec, DeploySpec]:
    """scale n=8 (SHIFT=100, the tuned geometry 1x8), n=16 with a=2 compiled in (SHIFT=200),
    n=12 (its tuned launch fails), n=7 with a=0 compiled in (no shift: the sign of a zero
    a shows); axpy<float> n=4 (SHIFT=10) and in place (SHIFT=30). The second spec: scale
    n=8 only (SHIFT=500)."""
    k = _kernels(cp)

    def scale(n: int, grid: int, block: int) -> Any:
        return lambda: k["scale"]((grid,), (block,), (np.arange(n, dtype=F32),
                                                      np.zeros(n, F32), F32(2), n))

    def axpy(x: np.ndarray, y: np.ndarray) -> Any:
        return lambda: k["axpy"]((1,), (4,), (x, y, F32(3), 4))

    e8 = _entry(tmp / "8", scale(8, 2, 4), defines={"SHIFT": "100"},
                launch=LaunchConfig((1, 1, 1), (8, 1, 1)))
    e16 = _entry(tmp / "16", scale(16, 4, 4), defines={"SHIFT": "200"}, constants={"a": 2.0})
    e12 = _entry(tmp / "12", scale(12, 3, 4), defines={"FAIL": "1"})
    a4 = _entry(tmp / "a4", axpy(np.ones(4, F32), np.ones(4, F32)), defines={"SHIFT": "10"})
    inplace = replace(a4, problem=replace(a4.problem, aliases=(("x", "y"),)),
                      variant=replace(a4.variant, defines={"SHIFT": "30"}))
    zero = _entry(tmp / "7", lambda: k["scale"]((2,), (4,), (
        np.arange(7, dtype=F32), np.zeros(7, F32), F32(0.0), 7)), constants={"a": 0.0})
    other = _entry(tmp / "o", scale(8, 2, 4), defines={"SHIFT": "500"})
    return DeploySpec((e8, e16, e12, a4, inplace, zero)), DeploySpec((other,))


def _array(kind: str, n: int) -> Any:
    if kind == "f32":
        return np.arange(n, dtype=F32) + 1
    if kind == "i32":  # viewed as float32 by the hooks, as CuPy passes the pointer
        return np.arange(n, dtype=np.int32)
    if kind == "f64":  # 8n bytes: 2n float32 for the kernel, another shape
        return np.arange(n, dtype=np.float64)
    if kind == "long":  # float32, another shape
        return np.arange(n + 4, dtype=F32)
    if kind == "strided":
        return (np.arange(2 * n, dtype=F32))[::2]
    if kind == "readonly":  # the route's key, but not writeable (the fast launch's check)
        a = np.zeros(n, F32)
        a.flags.writeable = False
        return a
    return None  # a null pointer


def _launches(seed: int, count: int) -> list[dict[str, Any]]:
    """Launches as recorded, each property changed on its own now and then (so that a launch
    differing from a routed one in one property only is common), from a pool (repeats)."""
    rng = random.Random(seed)

    def pick(usual: Any, *others: Any) -> Any:
        return rng.choice(others) if rng.random() < 0.12 else usual

    pool = []
    for _ in range(count // 4):
        kernel = rng.choice(["scale", "scale", "scale2", "axpy"])
        n = 4 if kernel == "axpy" else rng.choice([8, 8, 16, 16, 12, 7])
        n = pick(n, 4, 8, 16)
        a = pick(F32(3) if kernel == "axpy" else F32(2),
                 F32(2), 2.0, np.float64(2.0), F32(-0.0), F32(0.0), F32(3), 3, 3.0)
        nn = pick(n, np.int64(n), np.int32(n), (1 << 32) + n, 1 << 70, True)
        block = 4 if kernel == "axpy" else pick(4, 8)
        grid = 1 if kernel == "axpy" else (n + block - 1) // block
        geometry = pick(((grid,), (block,)), (grid, block), ((grid, 1), (block, 1)),
                        ((np.int64(grid),), (block,)), ((grid,), (np.int32(block),)))
        kw = pick({}, {"shared_mem": 0}, {"shared_mem": np.int64(0)},
                  {"enable_cooperative_groups": True}, {"enable_cooperative_groups": False})
        xk = pick("f32", "i32", "f64", "strided", "null")
        yk = "same" if rng.random() < 0.15 else pick("f32", "strided")
        pool.append({"kernel": kernel, "n": n, "a": a, "nn": nn, "geometry": geometry,
                     "kw": kw, "x": xk, "y": yk})
    return [rng.choice(pool) for _ in range(count)]


def _run(cp: Any, specs: tuple[DeploySpec, DeploySpec], plan: list[dict[str, Any]],
         routes: bool, monkeypatch: pytest.MonkeyPatch, phases: bool = True
         ) -> tuple[list[Any], Any, Counting]:
    """Run ``plan`` through the deployment of ``specs[0]`` (``phases``: the second spec for
    a sixth of it, an observer for a twelfth); what each launch did, the report, the events
    the observer saw, and the deployment."""
    monkeypatch.setitem(base._instances, "cuda", FakeCuda())  # nothing compiled yet
    FakeCuda.launches.clear()
    kernels = _kernels(cp)
    dep = Counting(specs[0])
    seen = Seen()
    events.set_substituter(dep if routes else EventsOnly(dep))
    outcomes: list[Any] = []
    try:
        for i, launch in enumerate(plan):
            if not phases:
                pass
            elif i == len(plan) // 3:
                dep.spec = specs[1]
            elif i == len(plan) // 2:
                dep.spec = specs[0]
            if phases and i == 2 * len(plan) // 3:
                events.add_observer(seen)
            elif phases and i == 3 * len(plan) // 4:
                events.remove_observer(seen)
            n = launch["n"]
            x = _array(launch["x"], n)
            y = x if launch["y"] == "same" and x is not None else _array(launch["y"], n)
            before = len(FakeCuda.launches)
            try:
                kernels[launch["kernel"]](*launch["geometry"],
                                          (x, y, launch["a"], launch["nn"]), **launch["kw"])
                error = None
            except Exception as exc:  # noqa: BLE001 - the outcome compared
                error = f"{type(exc).__name__}: {exc}"
            outcomes.append((i, error, None if y is None else y.tobytes(),
                             FakeCuda.launches[before:]))
    finally:
        events.remove_observer(seen)
        events.set_substituter(None)
    return outcomes, (dep.report().kernels, seen.events), dep


def test_routed_launches_take_the_decisions_of_the_event_path(
        cp: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _specs(cp, tmp_path)
    plan = _launches(seed=7, count=600)
    with_routes, report, dep = _run(cp, specs, plan, True, monkeypatch)
    events_only, report_events, dep_events = _run(cp, specs, plan, False, monkeypatch)
    assert dep_events.routed == 0
    for a, b in zip(with_routes, events_only):
        assert a == b
    assert report == report_events
    counts = report[0]
    assert counts["scale"].replaced > 50 and counts["axpy<float>"].replaced > 10
    reasons = {r for c in counts.values() for r in c.reasons}
    assert {"problem mismatch", "aliasing", "launch failure"} <= reasons, counts
    seen = report[1]  # the observer saw every launch it could, tuned ones as tuned
    assert len(seen) > 10 and any(defines for _, defines, _, _ in seen)
    assert dep.routed > len(plan) // 3, dep.routed  # most launches were routed
    assert dep.direct > len(plan) // 6, dep.direct  # many of them in one pass


@pytest.mark.reverify  # as in test_deploy_gpu.py: run_both itself must turn the check off
def test_the_gpu_check_agrees_on_the_stand_in(cp: Any, tmp_path: Path) -> None:
    """route_check.run_both, which test_deploy_gpu.py runs on CuPy, on the stand-in."""
    routed, plain, dep = run_both(cp, tmp_path)
    counts = routed[-1]["scale"]
    assert routed == plain and dep.routed > 10 and dep.direct > 5, (dep.routed, counts)
    assert counts.replaced > 10 and counts.fallback > 10, counts
    assert "re-verification" not in counts.reasons, counts


def test_route_keys_leave_what_they_cannot_key_to_events(cp: Any, tmp_path: Path) -> None:
    spec, _ = _specs(cp, tmp_path)
    dep = Deployment(spec)
    events.set_substituter(dep)
    try:
        k = cp.RawKernel(SRC, "scale")
        x, y = np.arange(8, dtype=F32), np.zeros(8, F32)
        k((2,), (4,), (x, y, F32(2), 8))  # decided through the event: the plan now exists
        backend = base.get_backend("cuda")
        info = k._kf_info
        plan = dep.route(backend, info.source, info.options, info.defines, info.signature)
        assert plan is not None and plan.values == (2, 3)  # a (compiled in for n=16), n
        nd = np.ndarray
        key = plan.route_key((2,), (4,), 0, (x, y, F32(2), 8), nd)
        assert key is not None and plan.route_key(2, 4, 0, [x, y, 2.0, 8], nd) is not None
        for grid, block, shm, args in (((np.int64(2),), (4,), 0, (x, y, F32(2), 8)),
                                       ((2,), (4.0,), 0, (x, y, F32(2), 8)),
                                       ((2,), (4,), np.int64(0), (x, y, F32(2), 8)),
                                       ((2,), (4,), 0, (x, None, F32(2), 8)),
                                       ((2,), (4,), 0, (x.view(np.matrix), y, F32(2), 8)),
                                       ((2,), (4,), 0, (x, y, F32(2), np.array(8))),
                                       ((2,), (4,), 0, (x, y, F32(2), 8.0 + 0j))):
            assert plan.route_key(grid, block, shm, args, nd) is None
        k((2,), (4,), (x, y, F32(2), 8))  # routed from now on
        assert len(plan.routes) == 1
        (route,) = plan.routes.values()
        assert route.decision is next(iter(plan.decisions.values()))
        dep.spec = DeploySpec(())  # another spec: another decider, no plan
        assert dep.route(backend, info.source, info.options, info.defines,
                         info.signature) is None
        assert not Deployment(spec, cache=False).route(backend, info.source, info.options,
                                                       info.defines, info.signature)
    finally:
        events.set_substituter(None)


BASE = {"kernel": "scale", "n": 8, "a": F32(2), "nn": 8, "geometry": ((2,), (4,)), "kw": {},
        "x": "f32", "y": "f32"}
ZERO = {**BASE, "n": 7, "nn": 7, "a": F32(0.0)}  # the entry with a=0.0 compiled in
AXPY = {**BASE, "kernel": "axpy", "n": 4, "nn": 4, "a": F32(3), "geometry": ((1,), (4,))}
MISMATCH = {**BASE, "nn": 7}  # a fallback (problem mismatch), routed too
VARIATIONS = [
    (ZERO, {"a": F32(-0.0)}), (BASE, {"a": F32(3)}), (BASE, {"a": 2.0}),
    (BASE, {"a": np.float64(2.0)}), (BASE, {"a": 2}), (BASE, {"y": "same"}),
    (BASE, {"x": "long"}), (BASE, {"x": "i32"}), (BASE, {"x": "f64"}), (BASE, {"x": "strided"}),
    (BASE, {"y": "strided"}), (BASE, {"y": "readonly"}), (BASE, {"x": "readonly"}),
    (AXPY, {"y": "readonly"}), (MISMATCH, {"x": "strided"}), (MISMATCH, {"y": "readonly"}),
    (MISMATCH, {"nn": np.int64(7)}), (BASE, {"x": "null"}), (BASE, {"y": "null"}),
    (BASE, {"kw": {"enable_cooperative_groups": True}}),
    (BASE, {"kw": {"enable_cooperative_groups": False}}), (BASE, {"kw": {"shared_mem": 0}}),
    (BASE, {"kw": {"shared_mem": np.int64(0)}}), (BASE, {"kw": {"shared_mem": 16}}),
    (BASE, {"geometry": (2, 4)}), (BASE, {"geometry": ((np.int64(2),), (4,))}),
    (BASE, {"geometry": ((2, 1), (4, 1))}), (BASE, {"geometry": ((1,), (8,))}),
    (BASE, {"nn": np.int64(8)}), (BASE, {"nn": np.int32(8)}), (BASE, {"nn": (1 << 32) + 8}),
    (BASE, {"nn": 1 << 70}), (BASE, {"nn": True}), (BASE, {"nn": 7}),
    (BASE, {"kernel": "scale2"}), (AXPY, {"y": "same"}), (AXPY, {"a": 3.0})]


@pytest.mark.parametrize(("base", "change"), VARIATIONS, ids=[
    f"{base['kernel']}-{next(iter(change))}={next(iter(change.values()))!r}"
    for base, change in VARIATIONS])
def test_a_launch_differing_in_one_property_is_not_mistaken_for_a_routed_one(
        cp: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, base: dict[str, Any],
        change: dict[str, Any]) -> None:
    """Each launch like a routed one but for one property, alternating with it: both paths
    agree on every launch (and the base launch is routed)."""
    specs = _specs(cp, tmp_path)
    other = {**base, **change}
    plan = [base, other, base, other, other, base, base, other]
    routed, report, dep = _run(cp, specs, plan, True, monkeypatch, phases=False)
    plain, report_events, _ = _run(cp, specs, plan, False, monkeypatch, phases=False)
    assert routed == plain and report == report_events
    assert dep.routed >= 2


def test_routes_hold_only_decisions_the_cache_holds(
        cp: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a decision cache of 3 (emptied often), after every launch each route's decision is
    one the plan's cache holds, and both paths still agree."""
    monkeypatch.setattr(fastpath, "MAX_DECISIONS", 3)
    specs = _specs(cp, tmp_path)
    plan = _launches(seed=11, count=200)
    dep = Counting(specs[0])
    kernels = _kernels(cp)
    events.set_substituter(dep)
    try:
        for launch in plan:
            x = _array(launch["x"], launch["n"])
            y = x if launch["y"] == "same" and x is not None else _array(launch["y"],
                                                                         launch["n"])
            with contextlib.suppress(Exception):
                kernels[launch["kernel"]](*launch["geometry"],
                                          (x, y, launch["a"], launch["nn"]), **launch["kw"])
            for p in dep._decider._plans._plans.values():
                held = {id(d) for d in p.decisions.values()}
                assert len(p.routes) <= 3 and all(id(r.decision) in held
                                                 for r in p.routes.values())
    finally:
        events.set_substituter(None)
    assert dep.routed > 20
    routed, report, _ = _run(cp, specs, plan, True, monkeypatch)
    plain, report_events, _ = _run(cp, specs, plan, False, monkeypatch)
    assert routed == plain and report == report_events
