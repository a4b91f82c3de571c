"""Issue 43 item 1 in evolve: the final measurement has one of the three speed verdicts; an
inconclusive best is neither a win nor called rejected or slower, everywhere it is printed
(the command, report.md, the demo's winners and result.json)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kernforge.backends import Kernel
from kernforge.cli.evolve_cmd import print_outcome
from kernforge.core import Status
from kernforge.evolve.types import Program
from kernforge.harness import ABResult
from kernforge.harness.provenance import IdleCheck
from kernforge.harness.verdict import judge_ab
from kernforge.pipeline.demo import pick_winners
from kernforge.pipeline.evolve import EvolveOutcome
from kernforge.pipeline.evolve_final import Final, checked, measurement_text
from kernforge.pipeline.evolve_report import Report, _markdown
from kernforge.record import load_recording, record
from kernforge.replay.validate import Validation


def _ab(ratios: tuple[float, ...]) -> ABResult:
    lo, hi = min(ratios), max(ratios)
    return ABResult(ratios=ratios, samples_a=((2e-3,),) * len(ratios),
                    samples_b=((1e-3,),) * len(ratios), first=("a",) * len(ratios),
                    ci_low=lo, ci_high=hi, coverage=0.98, confidence=0.95)


def _validation(verdict: str, ab: ABResult, *, idle: bool) -> Validation:
    seen = IdleCheck(idle, 0.1 if idle else 0.8, "test")
    speed = judge_ab(ab, idle=seen.idle, utilisation=seen.utilisation)
    reason = "" if verdict == "accepted" else "idle:busy"
    return Validation("unit", "key", verdict, Status.OK, reason,
                      "" if verdict == "accepted" else speed.reason, speedup=ab.speedup, ab=ab,
                      idle=seen, speed=speed)


def _final(v: Validation, variant: object = None) -> Final:
    c = checked(v)
    seed = Program(id="p1", code="x", parent_id=None, island=0, generation=0, fitness=1e-3,
                   status=Status.OK)
    return Final(seed, {}, variant, c.ab, c.ab.speedup if c.ab else 1.0,  # type: ignore[arg-type]
                 c.status, c.message, c.validation, None, c.measured, c.speed)


def test_an_inconclusive_best_is_neither_a_win_nor_rejected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ab = _ab((1.6,) * 7)
    f = _final(_validation("inconclusive", ab, idle=False))
    assert f.status == "INCONCLUSIVE" and not f.faster and f.counted == 1.0
    text = measurement_text(f)
    assert text.startswith("inconclusive: interleaved speedup 1.600x")
    assert "the device was busy (80% busy)" in text and "measure again" in text
    assert "REJECTED" not in text and "slower" not in text and "not exported" in text
    report = Report("k", f.counted, f.status, 1, 1, 0, 0, 0, 1.0, 0.0, 0.0, 1.0, 1.0)
    assert text in _markdown(report, f) and "speedup counted: **1.000x**" in _markdown(report, f)
    print_outcome(EvolveOutcome("k", tmp_path, None, None, f, report))  # type: ignore[arg-type]
    said = " ".join(capsys.readouterr().out.split())
    assert text in said and "REJECTED" not in said


def test_an_accepted_best_says_faster_or_not_faster() -> None:
    win = _final(_validation("accepted", _ab((1.5, 1.52, 1.49, 1.5, 1.51, 1.5, 1.5)),
                             idle=True))
    assert win.status == "OK" and win.faster and win.counted == pytest.approx(1.5)
    assert measurement_text(win).startswith("faster: interleaved speedup 1.500x")
    flat = _final(_validation("accepted", _ab((1.0, 1.005, 0.995, 1.0, 1.01, 0.99, 1.0)),
                              idle=True))
    assert flat.status == "OK" and not flat.faster and flat.counted == 1.0
    text = measurement_text(flat)
    assert text.startswith("not faster: interleaved speedup 1.000x")
    assert "not exported" in text and "a win" not in text


def test_the_demo_lists_an_inconclusive_evolved_best_with_its_reason(tmp_path: Path) -> None:
    k = Kernel("void inc(double *x, int n) { for (int i = 0; i < n; i++) x[i] += 1.0; }",
               "inc", backend="cpu")
    with record(tmp_path) as rec:
        k(np.zeros(4), 4)
    r = load_recording(rec.paths[0])
    f = _final(_validation("inconclusive", _ab((1.6,) * 7), idle=False),
               r.variant.with_(options={"opt_level": "O3"}))
    ev = SimpleNamespace(final=f, target=SimpleNamespace(primary=r))
    result = SimpleNamespace(tuned=None, evolved=[ev], not_deployed=[])
    assert pick_winners(result) == []  # type: ignore[arg-type]
    (left,) = result.not_deployed
    assert left.reason.startswith("inc (evolve): inconclusive: the device was busy")
    assert "slower" not in left.reason and "not verified" not in left.reason
