"""Supervised forge evaluation on the host emulator: a candidate that segfaults, aborts or hangs
costs that candidate only; kill -9 during a crashing candidate, then resume: it is
quarantined and no finished evaluation runs again; in-process and supervised runs check the
same inputs."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .faulty import CELL, run

FAULTY = "zmarch[lz=8,tx=32,ty=8,vx=4]"


def _perf(out: Path) -> dict[str, dict]:
    lines = [json.loads(x) for x in (out / "perf-log.jsonl").read_text().splitlines()]
    return {x.get("to", ""): x for x in lines}


def _journal(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "evaluations.jsonl").read_text().splitlines()[1:]]


KILLED = "RUNTIME_FAILED: the candidate killed its worker process in the run stage: killed by"


@pytest.mark.parametrize(("fault", "reason"), [
    ("segv", f"{KILLED} SIGSEGV"),
    ("abort", f"{KILLED} SIGABRT"),
    ("hang", "TIMEOUT: the candidate did not finish its run stage"),
])
@pytest.mark.slow
def test_a_faulty_candidate_costs_only_itself(tmp_path: Path, fault: str, reason: str) -> None:
    summary = run(tmp_path, {"zmarch": fault})
    perf = _perf(tmp_path)
    assert perf[FAULTY]["verdict"] == "rejected"
    assert perf[FAULTY]["reason"].startswith(reason)
    assert "hint: the worker was replaced" in perf[FAULTY]["reason"]
    # the others were screened in a fresh worker, the best gated and accepted
    screened = {e["start"][2] for e in _journal(tmp_path) if e.get("start", [0, 0])[1] == "screen"}
    assert {"ztile[lz=8,st=2,tx=32,ty=8,vx=4]", "planesweep[lz=8,ry=4,tx=32,ty=4,vx=1]"} <= screened
    # whether the best one beats the incumbent is a speed result (luck on a busy machine);
    # what isolation owes is that every other candidate was evaluated, not lost to the fault
    others = {k: v for k, v in perf.items() if k != FAULTY}
    assert others and not any(str(v.get("reason", "")).startswith(("RUNTIME_FAILED", "TIMEOUT"))
                              for v in others.values()), others
    assert not summary["regressed"]
    assert [r["oracle_ok"] for r in summary["final"]] == [True]


@pytest.mark.slow
def test_kill_9_during_a_crashing_candidate_then_resume(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, str(root / "tests/forge/faulty.py"), str(tmp_path),
                             "zmarch=slow-segv"], cwd=root)
    journal = tmp_path / "evaluations.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if journal.exists() and FAULTY in journal.read_text():
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the crashing candidate ran"
    time.sleep(0.5)  # the worker spins in the candidate, on its way to a segfault
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = journal.read_text().splitlines()
    last = json.loads(before[-1])
    assert last["start"] == [CELL.id, "screen", FAULTY]  # started, never finished
    summary = run(tmp_path, {"zmarch": "slow-segv"}, resume=True)
    assert summary["quarantined"] == [{"cell": CELL.id, "evaluation": ["screen", FAULTY]}]
    after = journal.read_text().splitlines()
    assert after[:len(before)] == before  # the finished evaluations: replayed, not run again
    starts = [json.loads(x)["n"] for x in after[1:] if "start" in json.loads(x)]
    assert len(starts) == len(set(starts))  # no evaluation started twice
    reason = _perf(tmp_path)[FAULTY]["reason"]
    assert reason.startswith("RUNTIME_FAILED:") and "quarantined on resume" in reason
    assert "killed its worker or the run" in reason
    # the round went on past the quarantined candidate (whether its best beat the incumbent is
    # a speed result, luck on a busy machine): every other candidate evaluated, none failed
    others = {k: v for k, v in _perf(tmp_path).items() if k != FAULTY}
    assert others and not any(str(v.get("reason", "")).startswith(("RUNTIME_FAILED", "TIMEOUT"))
                              for v in others.values()), others
    assert [r["oracle_ok"] for r in summary["final"]] == [True]
    lines = (tmp_path / "perf-log.jsonl").read_text().splitlines()
    assert len(lines) == len({json.loads(x).get("to") for x in lines})  # logged once each


@pytest.mark.slow
def test_supervised_and_in_process_runs_check_the_same_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernforge.forge import sessions

    for out, in_process in (("iso", False), ("inproc", True)):  # each as a fresh process's
        monkeypatch.setattr(sessions, "_SEEDS", itertools.count(1))
        run(tmp_path / out, {}, in_process=in_process)

    def checks(out: Path) -> list[tuple[str, float]]:
        js = _journal(out)
        starts = {e["n"]: e["start"] for e in js if "start" in e}
        return [(starts[e["n"]][2], e["done"]["value"][1]) for e in js
                if "done" in e and starts[e["n"]][1] == "check"]

    iso, inproc = checks(tmp_path / "iso"), checks(tmp_path / "inproc")
    # the same operators checked (up to where the emulator's noisy timings decide otherwise)
    # on the same inputs: the same oracle errors, to the bit
    common = next((i for i, (a, b) in enumerate(zip(iso, inproc, strict=False)) if a != b),
                  min(len(iso), len(inproc)))
    assert common >= 2 and iso[:common] == inproc[:common]
    if common < min(len(iso), len(inproc)):  # they part where the decisions part, not before
        assert iso[common][0] != inproc[common][0]
