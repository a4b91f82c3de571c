"""Requests sent in batches (one Dask task evaluating several in order): the same results as
one task each, in order, with their errors and their workers' deaths kept to themselves (a
real local service of two workers, the CPU backend)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.core import RecordingError, Status
from kernforge.service import Client
from kernforge.service.batch import batch_size
from kernforge.service.monitor import classify, evaluations_in, item_of
from kernforge.service.samples import fault, good_variants

PROTOCOL = {"warmup": 1, "repeat": 3}


def _verdicts(results: list) -> list:
    return [(m.status, len(m.samples), [(c.name, c.passed, c.mode) for c in m.checks])
            for m in results]


def test_a_batch_gives_every_request_its_own_result_in_order(client: Client, rec) -> None:
    wrong = fault(rec, "wrong")
    variants = [None, wrong, *good_variants(rec, 3), wrong, None]
    requests = [client.request(rec, v, **PROTOCOL) for v in variants]
    before = client.metrics().evaluations
    batched = client.submit_many(requests, batch=3)
    keys = [p.key for p in batched]
    assert keys[0] == keys[1] == keys[2] != keys[3] and len(set(keys)) == 3
    got = [p.result() for p in batched]
    alone = [p.result() for p in client.submit_many(requests, batch=1)]
    two = client.submit_many(requests[:2], batch=1)
    assert len({p.key for p in two}) == 2 and all(p.result() for p in two)
    want = [Status.OK, Status.WRONG_RESULT, Status.OK, Status.OK, Status.OK,
            Status.WRONG_RESULT, Status.OK]
    assert [m.status for m in got] == want
    assert _verdicts(got) == _verdicts(alone)  # same verification, same number of timings
    for i, m in enumerate(got):
        extra = dict(m.extra)
        assert 0 < extra["evaluate_s"] <= extra["worker_s"]
        assert (extra["announce_s"] > 0) == (i % 3 == 0)  # once per batch, on its first
    metrics = client.metrics()
    assert metrics.evaluations >= before + 2 * len(requests) + 2 and metrics.queued == 0


def test_an_error_that_is_not_the_candidates_stays_with_its_request(
        client: Client, rec, tmp_path: Path) -> None:
    pending = client.submit_many([client.request(rec, **PROTOCOL),
                                  client.request(tmp_path / "gone", **PROTOCOL),
                                  client.request(rec, **PROTOCOL)], batch=3)
    assert pending[0].result().ok and pending[2].result().ok
    with pytest.raises(RecordingError):
        pending[1].result()


def test_batches_spread_over_the_pinned_workers(client: Client, rec) -> None:
    before = {w["name"]: w["evaluations"] for w in client.workers()}
    results = client.evaluate_many(rec, [None] * 32, **PROTOCOL)  # the client's batch size
    assert all(m.ok for m in results)
    workers = client.workers()
    done = {w["name"]: w["evaluations"] - before[w["name"]] for w in workers}
    assert sum(done.values()) == 32 and all(n > 0 for n in done.values()), done
    assert {dict(m.extra)["worker"] for m in results} == {w["address"] for w in workers}
    assert len({tuple(w["cores"]) for w in workers}) == 2


@pytest.mark.slow
def test_a_crash_in_a_batch_is_charged_to_its_candidate(client: Client, rec) -> None:
    """A segfault and a hang inside batches of six: those two come back classified, the
    other evaluations of their batches are run again and come back OK; each fault killed one
    worker once (it was named, not found by sending everyone alone)."""
    restarts = client.metrics().worker_restarts
    variants = good_variants(rec, 10)
    variants.insert(3, fault(rec, "segfault"))
    variants.insert(8, fault(rec, "hang"))
    pending = client.submit_many([client.request(rec, v, **PROTOCOL) for v in variants],
                                 batch=6)
    assert len({p.key for p in pending}) == 2
    results = [p.result() for p in pending]
    segv, hang = results[3], results[8]
    assert segv.status is Status.RUNTIME_FAILED and "SIGSEGV" in segv.message
    assert dict(segv.extra)["stage"] == "run"
    assert hang.status is Status.TIMEOUT and "watchdog" in hang.message
    others = [m for i, m in enumerate(results) if i not in (3, 8)]
    assert len(others) == 10 and all(m.ok for m in others), [m.message for m in others]
    assert client.metrics().worker_restarts == restarts + 2


def test_the_batch_size_keeps_every_worker_busy_to_the_end() -> None:
    assert batch_size(7968, 2) == 16 and batch_size(96, 2) == 6
    assert batch_size(3, 2) == 1 and batch_size(0, 1) == 1 and batch_size(100, 0) == 13
    assert batch_size(7968, 2, limit=4) == 4


def test_a_death_names_its_item() -> None:
    assert evaluations_in("kf-eval-0123456789abcdef00000007-x12") == 12
    assert evaluations_in("kf-eval-0123456789abcdef0123456789abcdef") == 1
    log = "kernforge-stage: run 1.5 4\nFatal Python error: Segmentation fault\n"
    assert item_of({"text": log, "item": 2}) == 4  # the crash log is the worker's own word
    m = classify({"text": log, "worker": "tcp://w"})
    assert m.status is Status.RUNTIME_FAILED and dict(m.extra)["stage"] == "run"
    assert "SIGSEGV" in m.message
    assert item_of({"text": "kernforge-stage: run 1.5\nTimeout (0:00:01)!\n", "item": 2}) == 2
    assert item_of({"text": "", "item": 5}) == 5
    assert item_of({"deposit": {"status": "RUNTIME_FAILED"}, "text": "", "item": 1}) == 1
    assert item_of({"text": ""}) is None
