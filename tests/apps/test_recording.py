"""M2's recording of one dataset (apps/recording.py)."""

from __future__ import annotations

from pathlib import Path

from kernforge.apps.harness import AppHarness
from kernforge.apps.manifest import load_manifest
from kernforge.apps.recording import ceiling_text, kernel_times, record_dataset, shares
from kernforge.record.native_format import SPOOL


def test_a_redone_recording_does_not_keep_what_a_killed_attempt_left(tmp_path: Path) -> None:
    (tmp_path / "prog").mkdir()
    p = tmp_path / "app.toml"
    p.write_text('name = "e"\nsource = "prog"\nbuild = "true"\n[[datasets]]\nname = "a"\n'
                 'run = "echo hello"\n[check]\nkind = "exit"\n')
    m = load_manifest(p)
    out = tmp_path / "run" / "recording" / "a"
    stale = out / "heat-0"  # a unit and counts of the killed attempt (another process)
    stale.mkdir(parents=True)
    (stale / "manifest.json").write_text('{"kernel": {"entry": "heat"}}')
    (out / SPOOL).mkdir()
    (out / SPOOL / "summary-1.json").write_text(
        '{"kernels": [{"name": "heat", "seen": 9, "app_ms": [1.0]}]}')
    ran, units, problems = record_dataset(AppHarness(m, tmp_path / "run"), m.datasets[0], out)
    assert ran.returncode == 0 and "hello" in ran.stdout
    assert units == [] and not problems and not stale.exists()
    assert kernel_times(out, units) == []  # nothing of the killed attempt is counted


def test_a_run_that_is_all_replaceable_kernels_has_an_unbounded_ceiling() -> None:
    # a program timed by its own timer around its GPU loop: the kernels are the whole run
    kernels = [{"name": "k", "total_ms": 5.0, "units": ["u"]}]
    s = shares(kernels, run_s=0.004)
    assert s["candidate_share"] == 1.0 and ceiling_text(s["ceiling"]) == "unbounded"
    s = shares([{"name": "k", "total_ms": 1.0, "units": ["u"]}], run_s=0.004)
    assert s["candidate_share"] == 0.25 and ceiling_text(s["ceiling"]) == "1.33x"
