"""``kernforge export``'s selection (in process): only validated results are deployed, and the
evidence's times are the interleaved measurement's."""

from __future__ import annotations

from pathlib import Path

from deploy_helpers import record_axpy, write_result

from kernforge.cli.export_cmd import collect

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
