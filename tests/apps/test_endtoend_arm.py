"""M4's one-launch arm (apps/one_launch.py) with the program's runs replaced by timed callables:
the harness's own three-arm comparison and ``endtoend.measure`` run unchanged; the
interposer's fusion counts are read from a log file as the interposer writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernforge.apps import endtoend
from kernforge.apps import one_launch as ol
from kernforge.apps.harness import RunFailed, Setup
from kernforge.apps.report import write_report
from kernforge.apps.store import AppStore

from .test_endtoend_looks import Timed

LOG = {"fallbacks": 0, "malformed_lines": 0, "fusion": True, "fused_groups": 24,
       "flushed_unfused": 8, "entries": [{"name": "lapl", "replaced": 24, "fuse": 3,
                                          "companions": 0, "fused_groups": 24,
                                          "flushed_unfused": 8}]}


def _setups(tmp_path: Path, log: dict[str, Any] | None = LOG) -> tuple[Setup, ol.Arm]:
    fused = tmp_path / "deploy-log.json"
    if log is not None:
        fused.write_text(json.dumps(log))
    one = tmp_path / "one-launch-log.json"
    one.write_text(json.dumps({"fallbacks": 0, "entries": [{"name": "lapl", "replaced": 99}]}))
    return (Setup("deployed", Path("src"), {"KERNFORGE_DEPLOY_LOG": str(fused)}),
            ol.Arm(Setup(ol.ARM, Path("src"), {"KERNFORGE_DEPLOY_LOG": str(one)}),
                   {"swapped": [{"kernel": "lapl"}]}))


def test_the_arm_runs_in_the_same_rounds_and_is_reported(tmp_path: Path) -> None:
    h = Timed(["small", "large"], {"original": 3.0, "deployed": 1.0, ol.ARM: 2.0})
    setup, arm = _setups(tmp_path)
    state, reason, figures = endtoend.measure(h, setup, 7, 0.98, fused=True, arm=arm)
    assert state == "INTEGRATED", reason  # judged on the integration against the original
    small = figures["datasets"][0]
    assert small["speedup"] == 3.0 and len(small["ratios"]) == 10
    assert small["one_launch"]["speedup"] == 1.5 and small["one_launch"]["replaced"] == 99
    assert small["against_one_launch"]["speedup"] == 2.0
    assert small["against_one_launch"]["verdict"]["verdict"] == "faster"
    assert (small["fused_groups"], small["flushed_unfused"]) == (24, 8)
    arm_figs = figures["one_launch"]
    assert arm_figs["swapped"] == [{"kernel": "lapl"}]
    assert arm_figs["one_launch"]["geomean"] == 1.5
    assert arm_figs["against_one_launch"]["verdict"]["verdict"] == "faster"
    assert "small 3.000x [3.000, 3.000] (24 fused launches, 8 held launches run unfused)" \
        in reason
    assert ("the one-launch arm (each fused kernel's one-launch spec in its place) against "
            "the original: small 1.500x [1.500, 1.500], large 1.500x [1.500, 1.500]; "
            "geometric mean 1.500x [1.500, 1.500] (faster); the fused integration against "
            "the one-launch arm: small 2.000x [2.000, 2.000]") in reason
    assert "conclusively slower" not in reason
    # three runs a round: the progress counts them all, each labelled with its arm
    assert h.said[-3:] == [f"app: large run {k} of 30 (up to 63 while inconclusive) ({a})"
                           for k, a in ((28, "original"), (29, ol.ARM), (30, "deployed"))]


def test_a_fused_integration_slower_than_the_one_launch_arm_is_said(tmp_path: Path) -> None:
    h = Timed(["small"], {"original": 3.0, "deployed": 2.0, ol.ARM: 1.0})
    setup, arm = _setups(tmp_path)
    state, reason, figures = endtoend.measure(h, setup, 7, 0.98, fused=True, arm=arm)
    assert state == "INTEGRATED", reason  # what is deployed is not changed
    assert figures["one_launch"]["against_one_launch"]["verdict"]["slower"] is True
    assert "the fused integration against the one-launch arm: small 0.500x" in reason
    assert ("the fused integration is conclusively slower than the one-launch arm: the "
            "one-launch specs would be the faster deployment") in reason


def test_a_missing_log_and_no_arm_are_said(tmp_path: Path) -> None:
    h = Timed(["small"], {"original": 2.0, "deployed": 1.0})
    setup, _ = _setups(tmp_path, log=None)
    off = ol.Arm(None, {"skipped": "[integrate] compare_one_launch = false"})
    state, reason, figures = endtoend.measure(h, setup, 2, 0.98, fused=True, arm=off)
    assert state == "INTEGRATED", reason
    assert "small 2.000x [2.000, 2.000] (the interposer's log of the last run was missing: " \
           "fusion not seen)" in reason
    assert reason.endswith("; no one-launch arm: [integrate] compare_one_launch = false")
    assert figures["one_launch"] == {"skipped": "[integrate] compare_one_launch = false"}
    assert not any(ol.ARM in s for s in h.said)  # no third arm ran
    # a log whose deferral the interposer turned off in the run
    turned = tmp_path / "off.json"
    turned.write_text(json.dumps({**LOG, "fusion": False, "fused_groups": 0}))
    _, reason, figures = endtoend.measure(h, Setup("deployed", Path("src"), {
        "KERNFORGE_DEPLOY_LOG": str(turned)}), 2, 0.98, fused=True)
    assert figures["datasets"][0]["fusion_off"] is True
    assert "(0 fused launches, 8 held launches run unfused; the interposer had turned fusion " \
           "off (its message in the run's log under OUT/logs says why))" in reason
    # an integration without a fused entry: no counts, no arm, no words about either
    state, reason, figures = endtoend.measure(h, setup, 2, 0.98, arm=ol.Arm(None, {}))
    assert "fused" not in reason and "one-launch" not in reason and "one_launch" not in figures


class FailsOneLaunch(Timed):
    def timed(self, dataset: Any, setup: Setup) -> float:
        if setup.label == ol.ARM and dataset.name == "large":
            raise RunFailed(setup, dataset, "its own check failed: checksum 1.5 != 1.25")
        return super().timed(dataset, setup)


def test_an_arm_that_fails_its_check_is_dropped_not_the_integration(tmp_path: Path) -> None:
    h = FailsOneLaunch(["small", "large"], {"original": 2.0, "deployed": 1.0, ol.ARM: 1.5})
    setup, arm = _setups(tmp_path)
    state, reason, figures = endtoend.measure(h, setup, 2, 0.98, fused=True, arm=arm)
    assert state == "INTEGRATED", reason
    small, large = figures["datasets"]
    assert "one_launch" in small and "one_launch" not in large and large["speedup"] == 2.0
    assert figures["one_launch"]["failed"] == {
        "dataset": "large", "why": "its own check failed: checksum 1.5 != 1.25"}
    assert reason.endswith("; the one-launch arm fails the program's own check on large "
                           "(its own check failed: checksum 1.5 != 1.25): it is not compared")


def test_the_report_shows_the_arm_and_the_fusion_counts_per_dataset(tmp_path: Path) -> None:
    h = Timed(["small"], {"original": 3.0, "deployed": 1.0, ol.ARM: 2.0})
    setup, arm = _setups(tmp_path)
    state, reason, figures = endtoend.measure(h, setup, 2, 0.98, fused=True, arm=arm)
    out = tmp_path / "run"
    out.mkdir()
    store = AppStore.open(out)
    store.init("lapl", str(out / "app.toml"), "0" * 64)
    store.begin("M4")
    store.finish("M4", "DONE", reason, figures)
    store.set_state(state, f"M4: {reason}")
    store.close()
    md = write_report([out], tmp_path / "r.md")[0].read_text()
    lines = md.splitlines()
    head = lines.index("| dataset | original | with kernforge | speedup [CI] | one-launch arm "
                       "[CI] | fused against one-launch [CI] | interposer's fusion (last run) |")
    assert lines[head + 2] == (
        "| small | 3 s | 1 s | 3.000x [99% CI 3.000, 3.000] | 1.500x [99% CI 1.500, 1.500] | "
        "2.000x [99% CI 2.000, 2.000] | 24 fused launches, 8 held launches run unfused |")
    assert lines[head + 3].startswith("| geometric mean | | | 3.000x [95% bootstrap CI 3.000, "
                                      "3.000] | 1.500x [95% bootstrap CI 1.500, 1.500] | 2.000x")
    assert lines[head + 3].endswith(" | |")


class ArmThenOriginalFail(Timed):
    """The arm fails its check; then, measured again without it, the original fails."""
    arm_failed = False

    def timed(self, dataset: Any, setup: Setup) -> float:
        if setup.label == ol.ARM:
            self.arm_failed = True
            raise RunFailed(setup, dataset, "its own check failed: checksum 1.5 != 1.25")
        if setup.label == "original" and self.arm_failed:
            raise RunFailed(setup, dataset, "exit status 1")
        return super().timed(dataset, setup)


def test_the_original_failing_after_the_arm_was_dropped_is_blocked(tmp_path: Path) -> None:
    h = ArmThenOriginalFail(["small"], {"original": 2.0, "deployed": 1.0, ol.ARM: 1.5})
    setup, arm = _setups(tmp_path)
    state, reason, figures = endtoend.measure(h, setup, 2, 0.98, fused=True, arm=arm)
    assert state == "BLOCKED", reason
    assert reason.startswith("the unmodified program failed in M4")
    assert figures["failed"]["side"] == "original"
