"""What ``kernforge integrity validate`` prints of a validation: the speed verdict once, the
interval with its confidence, the idle checks in words (not as Python dicts)."""

from __future__ import annotations

import pytest

from kernforge.cli.integrity_cmd import _print_validation
from kernforge.core import Status
from kernforge.core.verdict import judge_evidence
from kernforge.harness.compare import ABResult
from kernforge.harness.provenance import IdleCheck
from kernforge.replay.validate import Validation


def test_an_inconclusive_validation_prints_its_verdict_once_and_in_words(
        capsys: pytest.CaptureFixture[str]) -> None:
    ab = ABResult((1.14,) * 17, ((1.0,),) * 17, ((1.0,),) * 17, ("a",) * 17, 1.0337, 1.3262,
                  confidence=1 - 0.01 / 3)
    speed = judge_evidence(ab.speedup, (ab.ci_low, ab.ci_high), idle=False, utilisation=0.79)
    busy = IdleCheck(False, 0.44, "/proc/stat during the measurement (1.9 s)")
    v = Validation("heat_step-0", "v", "inconclusive", Status.OK, "idle:busy",
                   message=speed.reason, speedup=ab.speedup, ab=ab, speed=speed,
                   notes={"busy_during": busy.to_json(), "verify": "5 run(s) verified",
                          "cache": {"protocol": "flushed", "by": "footprint", "note": ""}},
                   idle=IdleCheck(False, 0.79, "/proc/stat over 0.2 s"))
    _print_validation(v)
    out = capsys.readouterr().out
    assert out.count("the device was busy (79% busy)") == 1, out  # not the message again
    assert "speed: inconclusive: the device was busy" in out
    assert "(99.67% CI 1.0337-1.3262, 17 interleaved passes)" in out
    assert "busy_during: busy (44% busy; /proc/stat during the measurement (1.9 s))" in out
    assert "  idle: busy (79% busy; /proc/stat over 0.2 s)\n" in out
    assert "  cache: protocol: flushed; by: footprint\n" in out
    assert "{" not in out and " \n" not in out
