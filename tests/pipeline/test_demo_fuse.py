"""The demo's fusion stage (pipeline/demo_fuse.py): the output check of a fused run, the
decision (deployed only when the check passes, the interposer fused launches, and the program
is significantly faster than plain and than the one-launch deployment; otherwise the reason),
and its arms: the application in warm child processes, run by the demo's interleaved harness."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernforge.core import KernforgeError
from kernforge.pipeline.demo import APPS, DemoResult, _write_summary
from kernforge.pipeline.demo_child import AppProcess
from kernforge.pipeline.demo_deploy import ROUNDS, EndToEnd, interleave, paired
from kernforge.pipeline.demo_fuse import (
    FIGURES_REL,
    Fusion,
    decide,
    describe,
    fusion_stage,
    output_check,
    sequence_command,
)

LINE = "heat3d_cupy n=64 steps=500 dtype=float32 change={c} mean={m} checksum={h}\n(0.1 s)\n"
PLAIN = LINE.format(c="0", m="0.0312500001", h="00c0ffee00c0ffee")


def _e2e(ratios: list[float], fused_out: str = PLAIN, plain_out: str = PLAIN) -> EndToEnd:
    return EndToEnd(Path("fused.json"), [], [r * 0.01 for r in ratios], [0.01] * len(ratios),
                    list(ratios), plain_out, fused_out)


@pytest.mark.parametrize(("mean", "digest", "ok", "found"), [
    ("0.0312500001", "00c0ffee00c0ffee", True, "checksums identical"),
    ("0.0312500002", "0123456789abcdef", True,
     "checksum differs (rounding), the line's other figures agree within 3.2e-09 relative"),
    ("0.0313", "0123456789abcdef", False,
     "mean is 0.0313 with the fused spec, 0.0312500001 plain (1.6e-03 relative, above 1e-04)"),
])
def test_the_output_check_allows_rounding_and_nothing_more(mean: str, digest: str, ok: bool,
                                                           found: str) -> None:
    assert output_check(PLAIN, LINE.format(c="0", m=mean, h=digest)) == (ok, found)


def test_the_output_check_refuses_other_figures_and_a_missing_line() -> None:
    other = PLAIN.replace("steps=500", "steps=499").replace("00c0ffee00c0ffee", "1" * 16)
    assert output_check(PLAIN, other) == (False, "steps is 499 with the fused spec, 500 plain")
    nan = LINE.format(c="nan", m="0.0312500001", h="1" * 16)
    assert output_check(PLAIN, nan) == (False, "change is nan with the fused spec, 0 plain")
    assert output_check(PLAIN, "Traceback ...\n") == (
        False, "no checksum line in the fused run's output")
    fewer = PLAIN.replace(" dtype=float32", "").replace("00c0ffee00c0ffee", "1" * 16)
    assert output_check(PLAIN, fewer) == (
        False, "the checksum line has other figures with the fused spec")
    assert FIGURES_REL == 1e-4


def test_deployed_only_when_checked_fused_and_faster_than_both() -> None:
    fast, same = [1.6] * ROUNDS, [1.0] * ROUNDS
    assert decide(_e2e(fast), _e2e(fast), 10) == (True, "deployed")
    assert decide(_e2e(fast), None, 10) == (True, "deployed")  # no one-launch deployment
    ok, why = decide(_e2e(fast, LINE.format(c="0", m="0.05", h="1" * 16)), None, 10)
    assert not ok and why.startswith("the program's output check failed with the fused spec: "
                                     "mean is 0.05") and why.endswith(": not deployed")
    assert decide(_e2e(fast), None, 0) == (False, (
        "the interposer fused no launch of the program (its launches did not run as "
        "recorded): not deployed"))
    ok, why = decide(_e2e(same), None, 10)
    assert not ok and why.startswith("end to end against the plain program, not faster: "
                                     "1.000x") and why.endswith(": not deployed")
    ok, why = decide(_e2e(fast), _e2e(same), 10)
    assert not ok and why.startswith("end to end against the one-launch deployment, not "
                                     "faster") and why.endswith("the one-launch deployment stays")
    ok, why = decide(_e2e([1.6] * 7), None, 10)  # too few rounds for a verdict
    assert not ok and "inconclusive: 7 passes are too few" in why


def test_the_stage_line_and_the_summary(tmp_path: Path) -> None:
    class Match:  # FusedMatch's interface
        spec_path, speedup, ci, steps, note = tmp_path / "u.fused.json", 2.5, (2.4, 2.6), 7, "n"

    fast = [1.6] * ROUNDS
    f = Fusion(True, "deployed", tmp_path / "u", Match(), _e2e(fast), _e2e([1.2] * ROUNDS),
               "checksums identical", 4 * 71, 4)
    assert f.spec == Match.spec_path
    assert describe(f) == (
        "fused 7 steps per launch: 2.500x in replay [99% CI 2.400, 2.600]; end to end 1.600x "
        "against plain [1.600, 1.600] (medians 16.000 ms plain, 10.000 ms fused), 1.200x "
        f"against the one-launch deployment [1.200, 1.200]; 71 fused launches a run; "
        f"checksums identical; deployed {Match.spec_path}")
    assert describe(Fusion(False, "not fused: the kernel wrote 2 buffers")) == (
        "fusion: nothing fused: not fused: the kernel wrote 2 buffers")
    result = DemoResult(tmp_path, APPS["cuda"], 0, fusion=f)
    _write_summary(tmp_path / "summary.json", result)
    got = json.loads((tmp_path / "summary.json").read_text())["fusion"]
    assert got["deployed"] and got["steps"] == 7 and got["spec"] == str(Match.spec_path)
    assert got["vs_plain"]["speed"]["verdict"] == "faster" and got["vs_one_launch"]["speedup"] == 1.2
    assert APPS["cuda"].fuse_kernel == "heat_stencil" and APPS["cpu"].fuse_kernel is None


APP = """
import os, sys, time
time.sleep(float(os.environ.get("DEMO_TEST_SLEEP", "0")))
if os.environ.get("DEMO_TEST_FAIL") == "exit":
    sys.exit(3)
if os.environ.get("DEMO_TEST_FAIL") == "die":
    os._exit(9)
print(f"toy n={sys.argv[1]} mean=0.25 checksum={os.environ.get('DEMO_TEST_SUM', 'ab' * 8)}")
"""


@pytest.fixture
def toy(tmp_path: Path) -> list[str]:
    (tmp_path / "toy.py").write_text(APP)
    return ["python", str(tmp_path / "toy.py"), "8"]


def test_arms_in_warm_processes_run_interleaved(toy: list[str]) -> None:
    slow = {**os.environ, "DEMO_TEST_SLEEP": "0.05", "DEMO_TEST_SUM": "cd" * 8}
    seen: list[str] = []
    with AppProcess(toy) as plain, AppProcess(toy, env=slow, what="slow") as other:
        runs = interleave([plain, other], 2, label="toy", progress=seen.append)
        pid = other.proc.pid
        assert other() [0] >= 0.05 and other.proc.pid == pid  # the same process, warm
    assert seen == ["toy: round 1/2", "toy: round 2/2"]
    assert [len(r) for r in runs] == [3, 3] and other.runs == 4
    e = paired(Path("s.json"), [], runs[0], runs[1])
    assert len(e.ratios) == 2 and all(r < 1.0 for r in e.ratios)
    assert "checksum=abab" in e.plain_output and "checksum=cdcd" in e.deployed_output
    assert not e.identical and output_check(e.plain_output, e.deployed_output)[0]
    assert other.close() == {}  # no interposer log asked for


@pytest.mark.parametrize(("how", "message"), [
    ("exit", "the application exited with 3 (failing)"),
    ("die", "the application's process (failing) ended"),
])
def test_an_arm_that_fails_is_an_error(toy: list[str], how: str, message: str) -> None:
    with AppProcess(toy, env={**os.environ, "DEMO_TEST_FAIL": how}, what="failing") as arm, \
            pytest.raises(KernforgeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        arm()


def test_the_stage_says_why_when_nothing_was_recorded(toy: list[str], tmp_path: Path) -> None:
    said: list[str] = []
    f = fusion_stage(lambda seq: [*toy[:2], str(seq)], toy, tmp_path / "fusion",
                     kernel="heat_stencil", steps=(3,), progress=said.append)
    assert not f.deployed and f.match is None
    assert f.reason == "no sequence unit was recorded (no launch of heat_stencil was recorded)"
    assert said == ["recording the time loop natively (5 steps of heat_stencil)"]
    assert sequence_command(Path("/x/app.py"), 64, 8, ["--diag-every", "0"]) == [
        "python", "/x/app.py", "--n", "64", "--steps", "14", "--diag-every", "0"]


def test_the_in_process_rounds_and_a_one_launch_arm_share_the_harness(
        toy: list[str], tmp_path: Path) -> None:
    from kernforge.pipeline.demo_deploy import end_to_end, export_spec

    from .test_demo_worth import _winner

    spec = export_spec([_winner(tmp_path, "big", 2e-3, 1e-3)], tmp_path / "deploy.json")
    seen: list[str] = []
    e = end_to_end(toy, [], spec, rounds=2, progress=seen.append)  # in this process
    assert seen == ["end to end: round 1/2", "end to end: round 2/2"]
    assert len(e.ratios) == 2 and e.identical and e.substituted == 0
    with AppProcess(toy, spec=spec, what="with the one-launch spec") as one:
        seconds, out, replaced = one()  # the spec active in the child: nothing of it launched
    assert seconds >= 0 and out == e.plain_output and replaced == 0


def test_an_arm_that_hangs_is_ended_and_an_error(toy: list[str]) -> None:
    with AppProcess(toy, env={**os.environ, "DEMO_TEST_SLEEP": "30"}, what="hanging",
                    timeout_s=1.0) as arm:
        with pytest.raises(KernforgeError, match=r"the application \(hanging\) did not finish "
                                                 r"within 1 s"):
            arm()
        assert arm.proc.wait(timeout=10) != 0  # killed, not left running
