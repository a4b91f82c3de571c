"""How ``kernforge app batch`` shares device time: a ``--budget`` per allocation, capped
shares, what a program's next milestone is known to need (from its own recorded progress),
deferral instead of a start that would be stopped, and M3a keeping the units it finished
when its run is stopped."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from kernforge.apps.batch_estimate import next_need
from kernforge.apps.batch_store import BatchStore
from kernforge.apps.budget import share
from kernforge.apps.manifest import load_manifest
from kernforge.apps.store import AppStore
from kernforge.apps.strategies import Context, unit_rows
from kernforge.apps.strategies import operator as strat
from kernforge.cli.main import main

from .test_batch import _programs, manifest


def test_a_share_is_what_is_left_up_to_a_quarter_of_the_allocation() -> None:
    # 8 minutes for 12 programs: the first may take 2 (not 40 s, which stopped programs
    # mid-milestone); with 2 waiting, each may take half of what is left
    assert share(batch_left_s=480, programs_left=12, program_budget_s=None,
                 program_spent_s=0, allocation_s=480) == 120
    assert share(batch_left_s=300, programs_left=2, program_budget_s=None,
                 program_spent_s=0, allocation_s=480) == 150
    assert share(batch_left_s=50, programs_left=12, program_budget_s=None,
                 program_spent_s=0, allocation_s=480) == 50
    # --program-budget is the cap instead (what is left of it, over all the program's runs)
    assert share(batch_left_s=480, programs_left=12, program_budget_s=300,
                 program_spent_s=100, allocation_s=480) == 200


def test_a_new_budget_is_this_allocations_and_the_time_before_is_history(
        tmp_path: Path) -> None:
    store = BatchStore.open(tmp_path)
    try:
        store.add("a", 0, "a.toml", "")
        store.set_budget(480)
        store.heartbeat("a", 480)  # the first allocation spent
        b, since = store.allocation()
        assert b == 480 and b - (store.spent_s() - since) == 0
        store.set_budget(300)  # a new allocation: all of its 300 s are left
        b, since = store.allocation()
        assert b == 300 and b - (store.spent_s() - since) == 300
        store.heartbeat("a", 530)
        assert store.allocation()[0] - (store.spent_s() - store.allocation()[1]) == 250
    finally:
        store.close()


def _run_dir(run: Path, m1_s: float = 0.0, build_s: float = 0.0) -> AppStore:
    """An app run's database with M1 (and M2) done, M1 having taken ``m1_s``."""
    store = AppStore.open(run)
    store.init("p", "", "")
    store.begin("M1")
    store.finish("M1", "DONE", "ok", {"build_s": build_s})
    store.conn.execute("UPDATE milestones SET started = finished - ? WHERE name = 'M1'",
                       (m1_s,))
    return store


def test_the_next_milestone_needs_what_its_own_progress_says(tmp_path: Path) -> None:
    m = load_manifest(manifest(tmp_path, "p", rounds=3))  # e2e_rounds 7 by default
    run = tmp_path / "run"
    assert next_need(run, m, {}) is None  # not started: nothing known
    store = _run_dir(run, m1_s=42.0, build_s=10.0)  # 4 passes (first run + 3 rounds): 8 s
    need = next_need(run, m, {})
    assert need is not None and need.milestone == "M2" and need.seconds == pytest.approx(8)
    assert next_need(run, m, {"M2": 30.0}).seconds == 30  # type: ignore[union-attr]
    store.begin("M2")
    store.finish("M2", "DONE", "ok")
    store.begin("M3")
    assert next_need(run, m, {}) is None  # a first M3: nothing known
    store.begin("M3a")
    unit = tmp_path / "run" / "m3a" / "n4096" / "lapl-0"
    unit.mkdir(parents=True)
    (unit / unit_rows.UNFINISHED).write_text('{"seconds": 125.0}')
    need = next_need(run, m, {"M3": 40.0, "M3a": 40.0})
    assert need is not None and need.milestone == "M3a" and need.seconds == 125
    assert "unit n4096/lapl-0 was stopped after 2m 05s" in need.describe()
    (unit / unit_rows.ROW).write_text('{"matched": false}')  # finished after all
    assert next_need(run, m, {}) is None
    # M3a's time grows with its units: 3 datasets, one done in 20 s, one stopped after 125 s
    store.conn.execute("UPDATE milestones SET figures = ? WHERE name = 'M2'", (json.dumps(
        {"kernels": [{"name": "lapl", "share": 1.0, "kind": "native", "units": [
            f"/rec/{d}/lapl-0" for d in ("n1024", "n2048", "n4096")]}]}),))
    (unit / unit_rows.ROW).unlink()
    done = tmp_path / "run" / "m3a" / "n1024" / "lapl-0"
    done.mkdir(parents=True)
    (done / unit_rows.ROW).write_text('{"matched": false, "seconds": 20.0}')
    need = next_need(run, m, {})
    assert need is not None and need.seconds == 145, need
    assert need.why == ("unit n4096/lapl-0 was stopped after 2m 05s; 1 other unit(s) to "
                        "match, the fastest finished one took 20s")
    (unit / unit_rows.UNFINISHED).unlink()
    assert next_need(run, m, {}).seconds == 40  # type: ignore[union-attr]
    for name in ("M3a", "M3"):
        store.finish(name, "DONE", "ok")
    need = next_need(run, m, {})
    assert need is not None and need.milestone == "M4" and need.seconds == pytest.approx(112)
    store.close()


def test_a_program_whose_next_milestone_would_not_fit_is_deferred_not_started(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = manifest(tmp_path, "heat2d")
    out = tmp_path / "runs"
    store = _run_dir(out / "apps" / "heat2d")  # stopped in M3a, a unit after 125 s
    for name in ("M2", "M3", "M3a"):
        store.begin(name)
    store.finish("M2", "DONE", "ok")
    store.close()
    unit = out / "apps" / "heat2d" / "m3a" / "n4096" / "lapl-0"
    unit.mkdir(parents=True)
    (unit / unit_rows.UNFINISHED).write_text('{"seconds": 125.0}')
    batch = BatchStore.open(out)
    batch.add("heat2d", 0, str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest())
    batch.begin("heat2d")
    batch.finish("heat2d", "STOPPED", "SKIPPED", "stopped at its budget", spent_s=130)
    batch.close()
    assert main(["app", "batch", str(path), "--out", str(out), "--budget", "1m"]) == 1
    text = capsys.readouterr().out
    p = _programs(out)["heat2d"]
    assert p.attempts == 1 and p.status == "STOPPED", text  # not started again
    assert p.reason.startswith("deferred: its next milestone M3a needs at least 2m 05s "
                               "(unit n4096/lapl-0 was stopped after 2m 05s), more than the "
                               "1m 00s it could have now"), p.reason
    assert "device time 0s of a 1m 00s budget; 2m 10s over all the batch's runs" in text


@dataclass
class _Not:
    reason: str
    recognized: str | None = None


def _context(tmp_path: Path, units: list[Path]) -> Context:
    m = types.SimpleNamespace(name="heat2d", env={}, integrate=types.SimpleNamespace(
        match_repeat=3, lift_search_trials=0,
        narrow_after_first=4), measure=types.SimpleNamespace(min_share=0.05))
    kernels = [{"name": "lapl", "units": [str(u) for u in units], "share": 1.0,
                "kind": "native"}]
    return Context(cast(Any, m), cast(Any, None), tmp_path / "run", kernels, 1.0, {})


def test_m3a_stopped_in_a_unit_keeps_the_units_it_finished(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    units = [tmp_path / "rec" / d / "lapl-0" for d in ("n2048", "n4096", "n8192")]
    calls: list[str] = []
    stop_in = {"n4096"}

    def match_unit(unit: Path, *, out_dir: Path, repeat: int) -> _Not:
        calls.append(unit.parent.name)
        (out_dir / "partial.cu").write_text("half")
        if unit.parent.name in stop_in:
            raise KeyboardInterrupt  # the batch's SIGINT at the program's share
        return _Not(f"{unit.parent.name}: no stencil")

    matcher = types.ModuleType("kf_test_matcher")
    matcher.match_unit = match_unit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kf_test_matcher", matcher)
    monkeypatch.setattr(strat, "MODULE", "kf_test_matcher")
    ctx = _context(tmp_path, units)
    with pytest.raises(KeyboardInterrupt):
        strat.OperatorStrategy().apply(ctx)
    work = strat.OperatorStrategy.workdir(ctx.out)
    assert unit_rows.load(work / "n2048" / "lapl-0") is not None
    assert unit_rows.unfinished_s(work / "n4096" / "lapl-0") >= 0
    assert (work / "n4096" / "lapl-0" / unit_rows.UNFINISHED).is_file()
    stop_in.clear()
    calls.clear()
    o = strat.OperatorStrategy().apply(ctx)  # resumed: the finished unit is not matched again
    assert calls == ["n4096", "n8192"] and o.figures["kept_units"] == 1
    assert [k["reason"].split(": ")[1] for k in o.figures["kernels"]] == \
        ["n2048", "n4096", "n8192"]
    assert not (work / "n4096" / "lapl-0" / unit_rows.UNFINISHED).exists()
