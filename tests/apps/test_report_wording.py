"""``kernforge app report`` says what happened: the milestone an interrupted run was in, no
integrating strategy for a DROPPED application."""

from __future__ import annotations

from pathlib import Path

from kernforge.apps.report import load, write_report
from kernforge.apps.store import AppStore


def _run(out: Path, name: str) -> AppStore:
    out.mkdir(parents=True)
    store = AppStore.open(out)
    store.init(name, str(out / "app.toml"), "0" * 64)
    return store


def test_an_interrupted_run_shows_the_milestone_in_flight(tmp_path: Path) -> None:
    store = _run(tmp_path / "killed", "killed")
    store.begin("M1")  # then kernforge app run was killed
    store.close()
    md = write_report([tmp_path / "killed"], tmp_path / "r.md")[0].read_text()
    assert "not started" not in md
    assert "| killed | PENDING (M1 RUNNING) |" in md
    assert "## killed: PENDING (M1 in flight)" in md
    assert "M1 RUNNING since" in md and "--resume" in md


def test_a_dropped_application_names_no_integrating_strategy(tmp_path: Path) -> None:
    store = _run(tmp_path / "dropped", "dropped")
    store.begin("M3")
    store.finish("M3", "DONE", "tuned", {"used": ["tune"]})
    store.begin("M4")
    store.finish("M4", "FAILED", "slower end to end", {})
    store.set_state("DROPPED", "slower end to end")
    store.close()
    md = write_report([tmp_path / "dropped"], tmp_path / "r.md")[0].read_text()
    row = next(line for line in md.splitlines() if line.startswith("| dropped |"))
    assert row.split(" | ")[3] == "tune (dropped)"
    assert load(tmp_path / "dropped").app.state == "DROPPED"
