"""The application harness: build, run a dataset, check it, time it.

A :class:`Setup` is how the program runs: the directory (the original source, or the agent's
copy) and the environment kernforge adds (none for the original: the switch). Timings go
through :mod:`kernforge.harness` (interleaved rounds, medians, intervals, the speed verdicts),
as every number kernforge prints does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..harness.busy import watch_cpu
from ..harness.compare import ABResult, interleave_arms
from ..harness.provenance import IdleCheck
from ..harness.stats import bootstrap_ci, median
from ..harness.verdict import judge_ab, looks
from .checks import Verdict, printed_step, seconds, take_reference, verdict
from .manifest import AppManifestError, Dataset, Manifest
from .process import Ran, plain_env, run, write_log

# a printed time's last digit must be under this share of it: a step of 1 % moves a ratio of
# two such times by about 1 %, under the 2 % noise band a speedup must clear
COARSE = 0.01


@dataclass(frozen=True)
class Setup:
    label: str  # "original", "deployed", "agent"
    source: Path
    env: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "source": str(self.source), "env": dict(self.env)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Setup:
        return cls(d["label"], Path(d["source"]), dict(d.get("env") or {}))


class RunFailed(Exception):
    """A run that did not pass the program's own check (or printed no time)."""

    def __init__(self, setup: Setup, dataset: Dataset, why: str, ran: Ran | None = None):
        super().__init__(f"{dataset.name} ({setup.label}): {why}")
        self.setup, self.dataset, self.why, self.ran = setup, dataset, why, ran


class AppHarness:
    """One application's commands, with its manifest's environment and time limit."""

    def __init__(self, manifest: Manifest, out: Path,
                 progress: Callable[[str], None] = lambda s: None) -> None:
        self.m, self.out, self.progress = manifest, out, progress
        self.references: dict[str, dict[str, Any]] = {}
        self._n = _last_log(out / "logs")  # a resumed run adds logs after the killed run's

    def original(self) -> Setup:
        return Setup("original", self.m.source)

    def env(self, setup: Setup) -> dict[str, str]:
        env = plain_env()
        env.update(self.m.env)
        env.update(setup.env)
        return env

    def _log(self, what: str, ran: Ran) -> None:
        self._n += 1
        write_log(self.out / "logs" / f"{self._n:04d}-{what}.log", ran)

    def build(self, source: Path) -> Ran:
        ran = run(self.m.build_argv(source), cwd=source, env=self.env(Setup("build", source)),
                  timeout_s=self.m.timeout_s)
        self._log("build", ran)
        return ran

    def run(self, dataset: Dataset, setup: Setup, extra_env: Mapping[str, str] | None = None,
            argv: list[str] | None = None) -> Ran:
        env = self.env(setup)
        env.update(extra_env or {})
        ran = run(argv or dataset.argv(setup.source), cwd=setup.source, env=env,
                  timeout_s=self.m.timeout_s)
        self._log(f"{dataset.name}-{setup.label}", ran)
        return ran

    def reference(self, dataset: Dataset, ran: Ran) -> dict[str, Any]:
        """The first passing run of the unmodified program: the check's reference (a check
        or timer that never matches its output is a manifest error)."""
        ref = take_reference(self.m, dataset, ran, self.m.source, self.out)
        t = seconds(self.m.timer, ran)
        if t is None:
            raise AppManifestError(
                f"{self.m.path}: the timer pattern {self.m.timer.pattern!r} never matches the "
                f"output of dataset {dataset.name!r}; output ends: {ran.tail(300)!r}",
                hint="fix [timer] pattern, or remove [timer] to time the wall clock")
        if not t > 0:
            raise AppManifestError(
                f"{self.m.path}: the time the program printed for dataset {dataset.name!r} "
                f"reads {t:g} s (timer pattern {self.m.timer.pattern!r}): no speedup can be "
                "measured against it (printed too coarsely, or the timed region did no work)",
                hint="choose a timer the program prints with more digits (the commented "
                     "alternatives in a drafted manifest), or remove [timer] to time the "
                     "wall clock")
        printed = printed_step(self.m.timer, ran)
        if printed is not None and printed[1] > COARSE * t:
            raise AppManifestError(
                f"{self.m.path}: the time the program printed for dataset {dataset.name!r} "
                f"reads {printed[0]} ({self.m.timer.unit}): its last digit is "
                f"{100 * printed[1] / t:.1f} % of it, so a speedup read from it could be "
                f"rounding alone (printed too coarsely: kernforge needs the last digit under "
                f"{COARSE:.0%} of the time)",
                hint="choose a timer the program prints with more digits (the commented "
                     "alternatives in a drafted manifest), a larger dataset, or remove "
                     "[timer] to time the wall clock")
        self.references[dataset.name] = ref
        return ref

    def check(self, dataset: Dataset, setup: Setup, ran: Ran) -> Verdict:
        return verdict(self.m, dataset, ran, setup.source, self.out,
                       self.references.get(dataset.name, {}))

    def timed(self, dataset: Dataset, setup: Setup) -> float:
        """One checked run; its seconds. Raises :class:`RunFailed`."""
        ran = self.run(dataset, setup)
        v = self.check(dataset, setup, ran)
        if not v.ok:
            raise RunFailed(setup, dataset, f"its own check failed: {v.reason}", ran)
        t = seconds(self.m.timer, ran)
        if t is None:
            raise RunFailed(setup, dataset, "the timer pattern did not match", ran)
        if not t > 0:
            raise RunFailed(setup, dataset, f"the printed time reads {t:g} s", ran)
        return t

    def rounds(self, setup: Setup, rounds: int) -> dict[str, dict[str, Any]]:
        """``rounds`` passes over every dataset (the order alternating): per dataset the
        median seconds, its 95% interval and the samples."""
        samples: dict[str, list[float]] = {d.name: [] for d in self.m.datasets}
        for r in range(rounds):
            order = self.m.datasets if r % 2 == 0 else tuple(reversed(self.m.datasets))
            for d in order:
                self.progress(f"{self.m.name}: baseline round {r + 1}/{rounds}, {d.name}")
                samples[d.name].append(self.timed(d, setup))
        out = {}
        for name, s in samples.items():
            lo, hi = bootstrap_ci(s)
            out[name] = {"median_s": median(s), "ci": [lo, hi], "samples": s}
        return out

    def compare(self, dataset: Dataset, setup: Setup, rounds: int,
                max_rounds: int | None = None, also: Setup | None = None) -> dict[str, Any]:
        """Interleaved rounds of the original and ``setup`` (the side that goes first
        alternating), each run checked; more, up to ``max_rounds`` (default 3x ``rounds``),
        while the verdict is inconclusive (:func:`kernforge.harness.compare.interleave_arms`).
        The first look waits for the rounds an interval at its confidence needs
        (:func:`kernforge.harness.verdict.looks`: 10 of the usual 7 up to 21; 8 of 2 up to 6).
        The median per-round ratio, its distribution-free interval at ``confidence`` and the
        speed verdict (:mod:`kernforge.harness.verdict`: faster, not faster or inconclusive).

        ``also``: a third setup run in the same rounds (original, ``setup``, ``also``, the
        order rotated), each run checked; the rounds still stop on the verdict of ``setup``.
        Its comparison with the original is ``"also"``, and ``setup`` against it (> 1:
        ``setup`` is faster) ``"against_also"``.

        ``"busy"``: the host's CPUs watched over the rounds (:func:`~kernforge.harness.busy.
        watch_cpu`: other processes' share; the program's runs are this process's children);
        busy, every verdict of the rounds is inconclusive and says so."""
        k = [0]
        most = max_rounds or 3 * rounds
        plan = looks(rounds, most)
        arms = [self.original(), setup] + ([also] if also is not None else [])

        def side(s: Setup) -> Callable[[], float]:
            def once() -> float:
                k[0] += 1
                self.progress(f"{self.m.name}: {dataset.name} "
                              f"{run_label(k[0], len(arms) * plan.first, len(arms) * plan.limit)}"
                              f" ({s.label})")
                return self.timed(dataset, s)
            return once

        seen = watch_cpu()
        got = interleave_arms([side(s) for s in arms], passes=rounds, max_passes=most)
        busy = seen.result()
        out = {**_pair(got.pair(0, 1), busy), "busy": busy.to_json()}
        if also is not None:
            out["also"] = _pair(got.pair(0, 2), busy)
            out["against_also"] = _pair(got.pair(2, 1), busy)
        return out


def busy_machine(check: IdleCheck | dict[str, Any]) -> str:
    """What a busy verdict of M4's rounds names: the machine, and how it was read."""
    method = check.method if isinstance(check, IdleCheck) else check.get("method")
    return f"the machine ({method})"


def _pair(ab: ABResult, busy: IdleCheck) -> dict[str, Any]:
    """One comparison of interleaved rounds as M4 keeps it (``deployed_s``: the second's)."""
    speed = judge_ab(ab, idle=busy.idle, utilisation=busy.utilisation,
                     device=busy_machine(busy))
    return {"speedup": ab.speedup, "ci": [ab.ci_low, ab.ci_high],
            "verdict": speed.to_json(), "confidence": ab.confidence,
            "original_s": ab.median_a, "deployed_s": ab.median_b,
            "ratios": list(ab.ratios), "first": list(ab.first)}


def run_label(k: int, planned: int, most: int) -> str:
    """Run ``k`` of an interleaved comparison of ``planned`` runs, extended up to ``most``
    while the verdict is inconclusive."""
    if k <= planned:
        return f"run {k} of {planned} (up to {most} while inconclusive)"
    return f"run {k} of up to {most} (more runs: the verdict is still inconclusive)"


def _last_log(logs: Path) -> int:
    """The number of the last ``NNNN-*.log`` in ``logs`` (0 when there is none)."""
    nums = [int(p.name[:4]) for p in logs.glob("[0-9][0-9][0-9][0-9]-*.log")] \
        if logs.is_dir() else []
    return max(nums, default=0)


def geomean_ci(per_dataset: list[dict[str, Any]], *, n: int = 2000, seed: int = 0
               ) -> tuple[float, tuple[float, float]]:
    """The geometric mean of the datasets' speedups (each the median of its per-round
    ratios) and its 95% interval: a bootstrap that resamples each dataset's rounds."""
    g = math.exp(sum(math.log(d["speedup"]) for d in per_dataset) / len(per_dataset))
    rng = np.random.default_rng(seed)
    logs = np.zeros(n)
    for d in per_dataset:
        r = np.asarray(d["ratios"], dtype=np.float64)
        idx = rng.integers(0, r.size, size=(n, r.size))
        logs += np.log(np.median(r[idx], axis=1))
    boot = np.exp(logs / len(per_dataset))
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return g, (float(lo), float(hi))


def round_geomeans(per: list[dict[str, Any]]) -> list[float]:
    """Per round, the geometric mean of the datasets' ratios of that round (each round of
    each dataset an interleaved pair): the rounds of the whole program, judged like any
    interleaved comparison. As many rounds as the dataset with fewest."""
    n = min(len(d["ratios"]) for d in per)
    return [math.exp(sum(math.log(d["ratios"][i]) for d in per) / len(per)) for i in range(n)]
