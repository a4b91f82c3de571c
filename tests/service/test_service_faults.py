"""Fault isolation: candidates that crash or hang their worker, in a stream of requests."""

from __future__ import annotations

import random
import time

import dask
import pytest

from kernforge.core import Status
from kernforge.service import Client, ServiceConfig
from kernforge.service.monitor import PLUGIN
from kernforge.service.samples import CPU_KERNEL, fault, good_variants

PROTOCOL = {"warmup": 1, "repeat": 3}


# end to end; each fault alone: the other tests here and test_service_batch.py
@pytest.mark.slow
def test_a_stream_of_100_with_a_segfault_and_a_hang(client: Client, rec) -> None:
    """98 correct results; the segfault RUNTIME_FAILED, the hang TIMEOUT; nobody intervenes."""
    restarts = client.metrics().worker_restarts
    variants = good_variants(rec, 98)
    where = random.Random(5).sample(range(100), 2)
    for index, name in sorted(zip(where, ("segfault", "hang"))):
        variants.insert(index, fault(rec, name))
    pending = [client.submit(rec, v, **PROTOCOL) for v in variants]
    results = [p.result() for p in pending]
    segv, hang = results[where[0]], results[where[1]]
    assert segv.status is Status.RUNTIME_FAILED and "SIGSEGV" in segv.message
    assert dict(segv.extra)["stage"] == "run"
    assert hang.status is Status.TIMEOUT and "watchdog" in hang.message
    others = [m for i, m in enumerate(results) if i not in where]
    assert len(others) == 98 and all(m.ok for m in others), \
        [m.message for m in others if not m.ok]
    m = client.metrics()
    assert m.worker_restarts >= restarts + 2 and m.by_status.get("TIMEOUT", 0) >= 1
    assert len(client.workers()) == 2  # both back, and they serve again:
    assert all(r.ok for r in client.evaluate_many(rec, [None, None], **PROTOCOL))


@pytest.mark.slow
def test_abort_is_classified_and_does_not_poison_a_retry(client: Client, rec) -> None:
    first = client.evaluate(rec, fault(rec, "abort"), **PROTOCOL)
    assert first.status is Status.RUNTIME_FAILED and "SIGABRT" in first.message
    again = client.evaluate(rec, fault(rec, "abort"), **PROTOCOL)  # a new request: same answer
    assert again.status is Status.RUNTIME_FAILED
    assert client.evaluate(rec, **PROTOCOL).ok


@pytest.mark.slow
def test_a_fixed_timeout_overrides_the_derived_one(client: Client, rec) -> None:
    m = client.evaluate(rec, fault(rec, "hang"), timeout_s=0.5, **PROTOCOL)
    assert m.status is Status.TIMEOUT and dict(m.extra)["timeout_s"] == 0.5


SLOW = CPU_KERNEL.replace("void smooth(", "#include <unistd.h>\nvoid smooth(", 1).replace(
    "{\n    #pragma omp", "{\n    usleep(150000);\n    #pragma omp", 1)  # correct, 0.15 s a call


def _running(dask_scheduler) -> list[str]:
    return sorted(dask_scheduler.plugins[PLUGIN].running)


@pytest.mark.slow
def test_a_request_whose_worker_dask_closes_is_sent_again(client: Client, rec) -> None:
    """A worker that Dask itself closes or restarts (here its nanny restarts it) while it runs
    a request judged nothing: the request runs again and its result is the candidate's own,
    and the metrics count a close, not a death (the flake this fixes: a nanny's close of a
    freshly restarted worker under CPU load was reported as a crash of a correct candidate;
    the cause of that close is the next test's)."""
    assert "usleep" in SLOW
    before = client.metrics()
    pending = client.submit(rec, rec.variant.with_(source=rec.source.with_code(SLOW)),
                            timeout_s=60, **PROTOCOL)
    deadline = time.monotonic() + 60
    while not (running := client.dask.run_on_scheduler(_running)):
        assert not pending.done(), "the request's task ended before it was seen running"
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.05)
    client.dask.restart_workers(running)
    m = pending.result(timeout=120)
    assert m.ok, m.message
    after = client.metrics()
    assert after.closed == before.closed + 1, after
    assert after.deaths == before.deaths
    assert len(client.workers()) == 2


@pytest.mark.slow
def test_a_crashed_worker_keeps_its_nanny_however_long_its_restart(rec_path, rec) -> None:
    """Dask's SpecCluster closes a nanny whose worker has not registered again
    ``lost-worker-timeout`` after a death (15 s by default: under load, or after crashes in a
    row, a restart can take longer). The local cluster keeps its nannies: with the timeout far
    shorter than any restart, a crash still leaves both workers serving."""
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "10ms"}), \
            Client(config=ServiceConfig(workers=2, cores_per_worker=1)) as c:
        c.load([rec_path])
        assert c.evaluate(rec, fault(rec, "abort"), **PROTOCOL).status is Status.RUNTIME_FAILED
        c.wait_for_workers(2, timeout=60)
        time.sleep(0.5)  # past the timeout, after the restart
        assert len(c.cluster.workers) == 2 and len(c.workers()) == 2
        assert all(m.ok for m in c.evaluate_many(rec, [None, None], **PROTOCOL))
