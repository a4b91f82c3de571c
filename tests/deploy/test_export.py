"""``kernforge export``'s selection (in process): only validated results are deployed, and the
evidence's times are the interleaved measurement's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deploy_helpers import record_axpy, resign, write_result

from kernforge.pipeline.export import collect

TUNED = {"defines": {"BIAS": 0}, "options": {}}


def test_results_without_an_accepted_validation_are_skipped(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    run = tmp_path / "run"
    write_result(run / "a-unvalidated", rec, TUNED, speedup=3.0, verdict=None)
    write_result(run / "b-rejected", rec, TUNED, speedup=3.0, verdict="rejected")
    exported, skipped = collect(run, 1.0)
    assert exported == []
    assert any("a-unvalidated/result.json: not validated" in s for s in skipped), skipped
    assert any("b-rejected/result.json: not validated (validation verdict rejected)" in s
               for s in skipped), skipped
    write_result(run / "c-downgraded", rec, TUNED, speedup=2.0, verdict="downgraded")
    exported, _ = collect(run, 1.0)
    assert [ex.result.parent.name for ex in exported] == ["c-downgraded"]


def test_a_unit_whose_recorded_configuration_stayed_best_is_not_called_unvalidated(
        tmp_path: Path) -> None:
    """tune writes no validation when no configuration beat the recorded one; export said
    "not validated ...; re-run the tuning with this kernforge" of such a result."""
    rec = record_axpy(tmp_path / "rec")
    path = write_result(tmp_path / "run" / "u", rec, TUNED, speedup=1.0, verdict=None)
    resign(path, speedup_ci=None, interleaved=None)  # as replay/tuning.write_result writes it
    exported, (why,) = collect(tmp_path / "run", 1.0)
    assert exported == []
    assert why.endswith("result.json: the recorded configuration stayed the best: nothing to "
                        "deploy"), why


def test_an_inconclusive_result_says_why(tmp_path: Path) -> None:
    """export said only "status INCONCLUSIVE" of a result measured on a busy machine; the
    reason (and what to do) was in the file."""
    rec = record_axpy(tmp_path / "rec")
    path = write_result(tmp_path / "run" / "u", rec, TUNED, speedup=1.0, verdict="inconclusive",
                        status="INCONCLUSIVE", idle=False)
    reason = ("inconclusive: the device was busy (80% busy) while it was measured; measure "
              "again on an idle machine")
    doc = json.loads(path.read_text())
    resign(path, validation={**doc["validation"], "speed": {"verdict": "inconclusive",
                                                             "reason": reason}})
    _, (why,) = collect(tmp_path / "run", 1.0)
    assert why.endswith(f"result.json: {reason}"), why


def test_evidence_times_are_the_interleaved_medians(tmp_path: Path) -> None:
    """baseline_s / tuned_s of an exported entry agree with its (interleaved) speedup, also for
    a result whose median fields hold a search's biased best time."""
    rec = record_axpy(tmp_path / "rec")
    path = write_result(tmp_path / "run" / "u", rec, TUNED, speedup=2.0)
    resign(path, baseline_median_s=3e-3, best_median_s=1e-3,  # the search's: 3x, biased
           interleaved={"speedup": 2.0, "median_a": 4e-3, "median_b": 2e-3})
    (ex,), _ = collect(tmp_path / "run", 1.0)
    ev = ex.entry.evidence
    assert (ev.baseline_s, ev.tuned_s) == (4e-3, 2e-3)
    assert ev.baseline_s / ev.tuned_s == pytest.approx(ev.speedup)
