"""The demo keeps only wins that count (issue 32, item 1): verified, measured on an idle
device, the interleaved interval above 1 + the noise band; the others are listed with why."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from kernforge.backends import Kernel
from kernforge.harness import ABResult
from kernforge.harness.provenance import IdleCheck
from kernforge.pipeline.demo import pick_winners
from kernforge.record import load_recording, record


def _tuned(tmp: Path, *, idle: bool, ratios: tuple[float, ...], ci: tuple[float, float],
           accepted: bool = True, verdict: str | None = None) -> SimpleNamespace:
    k = Kernel("void inc(double *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0; }",
               "inc", backend="cpu")
    with record(tmp) as rec:
        k(np.zeros(4), 4)
    r = load_recording(rec.paths[0])
    ab = ABResult(ratios=ratios, samples_a=((2e-3,),) * len(ratios),
                  samples_b=((1e-3,),) * len(ratios), first=("a",) * len(ratios),
                  ci_low=ci[0], ci_high=ci[1])
    validation = SimpleNamespace(accepted=accepted,
                                 verdict=verdict or ("accepted" if accepted else "rejected"),
                                 idle=IdleCheck(idle, 0.1 if idle else 1.0, "test"),
                                 reason="" if accepted else "regression:prior-best",
                                 message="" if accepted else "below the prior best")
    return SimpleNamespace(ab=ab, validation=validation, recording=r,
                           best_variant=r.variant.with_(options={"opt_level": "O3"}),
                           speedup=ab.speedup)


def _result(tuned: SimpleNamespace) -> SimpleNamespace:
    return SimpleNamespace(tuned=tuned, evolved=[], not_deployed=[])


def test_a_win_measured_while_busy_is_not_kept(tmp_path: Path) -> None:
    res = _result(_tuned(tmp_path / "a", idle=False, ratios=(31.7,) * 7, ci=(9.16, 36.98)))
    assert pick_winners(res) == []  # type: ignore[arg-type]
    (why,) = res.not_deployed
    assert "inc (tune): inconclusive: the device was busy (100% busy)" in why.reason


def test_noise_and_an_interval_including_1_are_not_kept(tmp_path: Path) -> None:
    for ratios, ci in (((1.001,) * 7, (0.998, 1.004)), ((2.55,) * 7, (0.99, 5.34)),
                       ((1.015,) * 7, (1.01, 1.02))):
        res = _result(_tuned(tmp_path / str(ci), idle=True, ratios=ratios, ci=ci))
        assert pick_winners(res) == [], ci  # type: ignore[arg-type]
        assert re.search("not faster|inconclusive", res.not_deployed[0].reason)


def test_a_significant_idle_verified_win_is_kept(tmp_path: Path) -> None:
    res = _result(_tuned(tmp_path / "a", idle=True, ratios=(1.5,) * 7, ci=(1.4, 1.6)))
    (w,) = pick_winners(res)  # type: ignore[arg-type]
    assert w.source == "tune" and res.not_deployed == []
    rejected = _result(_tuned(tmp_path / "b", idle=True, ratios=(1.5,) * 7, ci=(1.4, 1.6),
                              accepted=False))
    assert pick_winners(rejected) == []  # type: ignore[arg-type]
    assert "not verified" in rejected.not_deployed[0].reason
    assert "regression:prior-best below the prior best" in rejected.not_deployed[0].reason


def test_a_win_validated_on_a_busy_machine_is_inconclusive_not_unverified(tmp_path: Path
                                                                          ) -> None:
    # validate's "inconclusive": every correctness gate passed, the speed was undecided; the
    # demo said "not verified (an integrity gate rejected it ...): idle:busy inconclusive: ..."
    tuned = _tuned(tmp_path / "a", idle=False, ratios=(3.2,) * 21, ci=(1.002, 15.9),
                   accepted=False, verdict="inconclusive")
    tuned.validation.reason, tuned.validation.message = "idle:busy", "inconclusive: busy"
    res = _result(tuned)
    assert pick_winners(res) == []  # type: ignore[arg-type]
    (why,) = res.not_deployed
    assert why.reason.startswith("inc (tune): inconclusive: the device was busy (100% busy)")
    assert "not verified" not in why.reason and "idle:busy" not in why.reason
