"""kernforge evolve on the CPU heat example: LLM proposer against the loopback server, kill -9
and resume, strict configuration, report files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kernforge.cli.main import main
from kernforge.core import ConfigError, Status
from kernforge.evolve.store import Store
from kernforge.llm.fake_server import FakeLLMServer
from kernforge.pipeline.evolve import evolve_kernel
from kernforge.pipeline.evolve_config import config_from_dict, load_config
from kernforge.pipeline.evolve_eval import make_evolve_evaluator
from kernforge.pipeline.export import ACCEPTED_VERDICTS
from kernforge.record import find_recordings, load_recording

from .evolve_helpers import (
    ROOT,
    kill_child_mid_run,
    llm_config,
    memoized,
    replaying,
    scripted_reply,
    stored_results,
)

ITERS = 16


def _recs(path: Path) -> list:
    return [load_recording(p) for p in find_recordings(path)]


def _population(db: Path) -> tuple[list, dict, list]:
    with Store(db) as s:
        progs = [(p.id, p.code, p.parent_id, p.island, p.generation, p.fitness, p.status)
                 for p in s.programs()]
        its = [(i["iteration"], i["outcome"], i["parent_id"], i["code_hash"])
               for i in s.iterations()]
        return progs, s.cells(), its


def _assert_final_consistent(final: Any, recorded_key: Any) -> None:
    """What each end-of-run status means, spelled out (no status is success by itself)."""
    assert final.best is not None and final.result_json is not None
    doc = json.loads(final.result_json.read_text())
    if final.status == "OK":  # validated: every gate passed, the speedup is measured
        assert final.ab is not None and final.speedup == final.ab.speedup > 0
        assert final.validation["verdict"] in ACCEPTED_VERDICTS and final.message == ""
        assert doc["status"] == "OK" and doc["speedup_ci"] is not None
    elif final.status == "REJECTED":  # a gate refused the winner: recorded, never exported
        assert final.ab is None and final.speedup == 1.0
        reason = final.validation["reason"]
        assert final.validation["verdict"] == "rejected" and reason
        assert final.message.startswith(f"{reason}: ")
        assert doc["status"] == "REJECTED"
    elif final.status == "INCONCLUSIVE":  # busy or noisy: neither a win nor a rejection
        assert final.ab is None and final.measured is not None and final.speedup == 1.0
        assert final.validation["verdict"] == "inconclusive" and not final.faster
        assert final.speed is not None and final.speed.verdict.value == "inconclusive"
        assert doc["status"] == "INCONCLUSIVE" and doc["speed"]["verdict"] == "inconclusive"
    else:
        assert final.status == "UNCHANGED", final.status
        assert final.variant.key() == recorded_key and final.validation is None
        assert doc["status"] == "OK" and doc["speedup"] == 1.0


@pytest.mark.slow
def test_llm_evolution_completes_with_report(heat_recordings: Path, tmp_path: Path) -> None:
    recs = _recs(heat_recordings)
    with FakeLLMServer(scripted_reply, latency=0.01) as srv:
        out = evolve_kernel(recs, llm_config(srv.base_url, 10), tmp_path / "run")
        assert len(srv.requests) >= 10
    assert out.result.iterations == 10
    with Store(tmp_path / "run" / "evolve.db") as s:
        statuses = Counter(e["data"]["status"] for e in s.events("evaluation_finished"))
        outcomes = Counter(i["outcome"] for i in s.iterations())
        calls = s.llm_calls()
    assert statuses["OK"] >= 2, statuses  # the seed and at least one valid change
    assert len(calls) == 10 and all(c["model"] == "fast" for c in calls if not c["error"])
    assert sum(c["prompt_tokens"] for c in calls) > 0
    assert outcomes["evaluated"] >= 2
    _assert_final_consistent(out.final, out.target.primary.variant.key())
    run = tmp_path / "run"
    for name in ("report.md", "report.json", "best_so_far.png", "evolve.db", "best.src"):
        assert (run / name).is_file(), name
    report = json.loads((run / "report.json").read_text())
    assert report["evaluations"] == sum(statuses.values())
    assert report["lineage"][0]["id"] == "seed" and report["evaluations_per_hour"] > 0
    result = json.loads(out.final.result_json.read_text())  # type: ignore[union-attr]
    assert result["format"] == "kernforge-tune-result" and result["sampler"] == "evolve"
    if out.final.best.id != "seed":
        assert result["best"]["variant"]["code"] == out.final.best.code
    assert "```diff" in (run / "report.md").read_text() or out.final.best.id == "seed"


# end to end; the same in the controller: tests/evolve/test_resume.py
@pytest.mark.slow
def test_kill9_mid_run_resumes_quarantining_what_was_in_flight(heat_recordings: Path,
                                                      tmp_path: Path) -> None:
    recs = _recs(heat_recordings)
    memo = tmp_path / "memo"
    with FakeLLMServer(scripted_reply, latency=0.05) as srv:
        ref = evolve_kernel(recs, llm_config(srv.base_url, ITERS), tmp_path / "ref",
                            evaluate=memoized(make_evolve_evaluator(recs, inner_trials=2,
                                                                    repeat=3), memo),
                            validate_winner=False)
        assert ref.result.iterations == ITERS
        run_dir = tmp_path / "killed"
        db = run_dir / "evolve.db"
        kill_child_mid_run(heat_recordings, run_dir, str(memo), srv.base_url, ITERS, "0.3")
        with Store(db) as s:
            applied = s.get_state("next_apply")
            finished_before = {e["program_id"] for e in s.events("evaluation_finished")}
            in_flight = {e["program_id"] for e in s.events("evaluation_started")} \
                - finished_before
        assert 0 < applied < ITERS
        resumed = evolve_kernel(recs, llm_config(srv.base_url, ITERS), run_dir, resume=True,
                                evaluate=memoized(make_evolve_evaluator(recs, inner_trials=2,
                                                                        repeat=3), memo),
                                validate_winner=False)
        # what was in flight at the kill is quarantined (issue 29), so the reference is an
        # uninterrupted run fed the killed run's own results, quarantined ones included
        again = evolve_kernel(recs, llm_config(srv.base_url, ITERS), tmp_path / "again",
                              evaluate=replaying(stored_results(db)), validate_winner=False)
    assert resumed.result.iterations == again.result.iterations == ITERS
    assert _population(db) == _population(tmp_path / "again" / "evolve.db")
    with Store(db) as s:
        per_program = Counter(e["program_id"] for e in s.events("evaluation_finished"))
        status = {p.id: p.status for p in s.programs()}
    assert max(per_program.values()) == 1, per_program  # no evaluation repeated
    assert finished_before <= set(per_program)
    assert all(status[p] is Status.RUNTIME_FAILED for p in in_flight)
    assert resumed.result.evaluations == \
        len(per_program) - len(finished_before) - len(in_flight)


def test_cli_rejects_an_unknown_key_naming_it(heat_recordings: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("evolve:\n  seed: 1\n  max_iteratons: 3\nproposers: [{kind: offline}]\n")
    status = main(["evolve", str(heat_recordings), "--config", str(cfg), "--out",
                   str(tmp_path / "o")])  # in this process: the other CLI tests start one
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert "max_iteratons" in err and "bad.yaml" in err
    toml = tmp_path / "bad.toml"
    toml.write_text('[tuner]\ntrials = 2\npreset = "quick"\nwarmup = 1\n')
    with pytest.raises(ConfigError, match="'warmup' in tuner"):
        load_config(toml)


@pytest.mark.parametrize("data, words", [
    ({"evolv": {}}, "'evolv'"),
    ({"proposers": [{"kind": "llm", "models": [{"name": "m", "wieght": 1}]}]}, "wieght"),
    ({"proposers": [{"kind": "offline", "command": "x"}]}, "'command' in proposers[0]"),
    ({"proposers": [{"kind": "magic"}]}, "magic"),
    ({"evolve": {"mapelites": {"islandz": 2}}}, "islandz"),
    ({"tuner": {"trials": -1}}, "tuner.trials"),
])
def test_config_errors_name_the_key(data: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict(data, "cfg.yaml")


def test_example_configs_load() -> None:
    for name in ("evolve-cpu.yaml", "evolve-cuda.toml"):
        cfg = load_config(ROOT / "examples" / name)
        assert cfg.proposers and cfg.evolve.max_iterations > 0


# end to end through the CLI; the same run in-process: test_llm_evolution_completes...
@pytest.mark.slow
def test_cli_runs_offline_and_export_picks_up_the_result(heat_recordings: Path,
                                                         tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[evolve]\nseed = 1\nmax_iterations = 4\neval_slots = 1\nllm_slots = 1\n'
                   '[[proposers]]\nkind = "offline"\n[tuner]\ntrials = 2\nrepeat = 3\n')
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "kernforge", "evolve", str(heat_recordings),
                        "--config", str(cfg), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "interleaved speedup" in r.stdout or "no interleaved measurement" in r.stdout
    assert list(out.glob("heat_step/*/result.json"))
    (result,) = out.glob("heat_step/*/result.json")
    doc = json.loads(result.read_text())
    verdict = (doc.get("validation") or {}).get("verdict")
    e = subprocess.run([sys.executable, "-m", "kernforge", "export", str(out), "--min-speedup",
                        "0"], capture_output=True, text=True, timeout=120, check=False)
    said = e.stdout + e.stderr
    gated = "not faster" in said or "inconclusive" in said
    if doc["status"] == "OK" and verdict in ACCEPTED_VERDICTS and gated:
        # verified, but the win rule refuses it (too small for the noise band in this short
        # run, or measured on a busy machine): export says why and writes nothing
        assert e.returncode == 1 and not (out / "deploy.json").exists(), said
        assert f"skipped {result}" in said, said
    elif doc["status"] == "OK" and verdict in ACCEPTED_VERDICTS:  # exportable: picked up
        assert e.returncode == 0, said
        spec = json.loads((out / "deploy.json").read_text())
        assert len(spec["entries"]) == 1, spec["entries"]
        assert "skipped" not in e.stderr, said
    elif doc["status"] == "REJECTED":  # the winner failed a gate (timing noise in this fast
        assert verdict == "rejected" and doc["validation"]["reason"], doc  # run): skipped
        assert e.returncode == 1 and not (out / "deploy.json").exists(), said
        assert "status REJECTED" in " ".join(e.stderr.split()), said
    elif doc["status"] == "INCONCLUSIVE":  # measured on a busy or noisy machine: skipped
        assert verdict == "inconclusive", doc  # with the verdict's reason, not "rejected"
        assert e.returncode == 1 and not (out / "deploy.json").exists(), said
        assert "inconclusive" in said and "status INCONCLUSIVE" not in said, said
    else:  # UNCHANGED: the recorded kernel stayed the best, nothing was validated
        assert doc["status"] == "OK" and doc["validation"] is None, doc
        assert doc["message"] == "the recorded kernel stayed the best", doc
        assert e.returncode == 1 and "not validated" in " ".join(e.stderr.split()), said
    r2 = subprocess.run([sys.executable, "-m", "kernforge", "evolve", str(heat_recordings),
                         "--config", str(cfg), "--out", str(out)],
                        capture_output=True, text=True, timeout=120, check=False)
    assert r2.returncode == 2 and "--resume" in r2.stderr
