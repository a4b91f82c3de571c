"""The service on a local cluster (real Dask, real worker processes, the CPU backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernforge.core import RecordingError, Status
from kernforge.service import Client
from kernforge.service.samples import fault, good_variants
from kernforge.service.tasks import validate_task
from kernforge.tune import Budget

PROTOCOL = {"warmup": 1, "repeat": 3}


def test_evaluate_returns_a_measurement_with_every_stage(client: Client, rec) -> None:
    m = client.evaluate(rec, **PROTOCOL)
    assert m.status is Status.OK and len(m.samples) == 3
    stages = dict(m.stages)
    assert {"compile", "restore", "run", "verify", "measure"} <= set(stages)
    extra = dict(m.extra)
    assert extra["worker"].startswith("tcp://127.0.0.1") and extra["timeout_s"] >= 1.0


def test_variants_configs_and_failures_come_back_typed(client: Client, rec) -> None:
    o3, = good_variants(rec, 2)[1:]
    assert client.evaluate(rec, o3, **PROTOCOL).ok
    point = client.evaluate(rec, config={"opt.opt_level": "O3", "launch.threads": 1}, **PROTOCOL)
    assert point.ok
    wrong = client.evaluate(rec, fault(rec, "wrong"), **PROTOCOL)
    assert wrong.status is Status.WRONG_RESULT and "y:" in wrong.message
    broken = rec.variant.with_(source=rec.source.with_code(
        "void smooth(const double *x, double *y, long n) { y[0] = x[0] +; }"))
    assert client.evaluate(rec, broken, **PROTOCOL).status is Status.COMPILE_FAILED
    bad = client.evaluate(rec, config={"opt.opt_level": "O7"}, **PROTOCOL)
    assert bad.status is Status.INVALID_CONFIG


def test_validate_verifies_without_timing(client: Client, rec_path: Path, rec) -> None:
    ok, wrong = client.validate([rec_path, rec_path], None)[0], \
        client.validate(rec_path, fault(rec, "wrong"))[0]
    assert ok.ok and not ok.samples and ok.checks
    assert wrong.status is Status.WRONG_RESULT


def test_a_missing_recording_raises_the_typed_error(client: Client, tmp_path: Path) -> None:
    with pytest.raises(RecordingError):
        client.evaluate(tmp_path / "nothing-here")


def test_workers_are_pinned_and_hold_the_recording(client: Client, rec_path: Path) -> None:
    workers = client.workers()
    assert len(workers) == 2
    cores = [tuple(w["cores"]) for w in workers]
    assert len(set(cores)) == 2 and all(len(c) == 1 for c in cores)
    assert all(str(rec_path.resolve()) in w["recordings"] for w in workers)
    assert all(w["resources"] == {"replay": 1} for w in workers)


def test_metrics_count_evaluations_and_stages(client: Client, rec) -> None:
    before = client.metrics().evaluations
    client.evaluate_many(rec, [None] * 4, **PROTOCOL)
    m = client.metrics()
    assert m.evaluations >= before + 4 and m.workers == 2 and m.queued == 0
    assert m.evaluations_per_s > 0 and m.by_status.get("OK", 0) >= 4
    assert {"compile", "restore", "run", "verify"} <= set(m.stage_mean_s)


@pytest.mark.slow
def test_tune_runs_parallel_tpe_on_the_workers(client: Client, rec, tmp_path: Path) -> None:
    seen: list[int] = []
    result = client.tune(rec, preset="quick", budget=Budget(trials=6), repeat=3, warmup=1,
                         run_dir=tmp_path, on_trial=lambda t: seen.append(t.number),
                         user_space={"def.BLK": {"ordinal": [64, 256]}})
    assert result.study.evaluations == 6 and len(seen) >= 6
    assert all(t.ok for t in result.study.trials if t.evaluated)
    assert result.best_variant is not None
    data = json.loads((tmp_path / rec.name / "result.json").read_text())
    assert data["format"] == "kernforge-tune-result" and data["evaluations"] == 6
    # a winner other than the recorded configuration is validated before "OK" is written
    if result.ab is not None:
        assert result.validation is not None
        assert data["validation"]["verdict"] == result.validation.verdict
        assert data["status"] == ("OK" if result.validation.accepted else "INCONCLUSIVE"
                                  if result.validation.verdict == "inconclusive" else "REJECTED")
        assert (tmp_path / rec.name / "ledger.jsonl").exists()
    else:
        assert data["validation"] is None and data["speedup"] == 1.0
    assert (tmp_path / rec.name / "history.png").exists()


@pytest.mark.slow
def test_validate_task_runs_every_gate_on_a_worker(client: Client, rec_path: Path, rec) -> None:
    o3 = good_variants(rec, 2)[1]
    ok = client.call(validate_task, str(rec_path), o3, None, 3, None, client.limits,
                     key="validate")
    # a correct variant reaches the re-measurement (then accepted, inconclusive on a busy
    # machine, or rejected only when it is conclusively slower than the recorded one)
    assert ok.ab is not None and ok.ab.passes >= 3
    assert ok.accepted or ok.reason.startswith(("regression", "measure:inconclusive",
                                                "idle:busy")), ok.reason
    wrong = client.call(validate_task, str(rec_path), fault(rec, "wrong"), None, 3, None,
                        client.limits, key="validate")
    assert wrong.verdict == "rejected" and wrong.status is Status.WRONG_RESULT
