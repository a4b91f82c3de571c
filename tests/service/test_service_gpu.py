"""The service on the cuda backend (the GPU machine: `pytest -m gpu tests/service`): one worker
per GPU pinned by CUDA_VISIBLE_DEVICES; an illegal address, a trap and an endless kernel each
restart the worker and come back classified, while every other request completes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from kernforge.core import BackendUnavailableError, Status
from kernforge.record import load_recording
from kernforge.service import Client, ServiceConfig
from kernforge.service.samples import fault, good_variants, record_sample

pytestmark = pytest.mark.gpu
PROTOCOL = {"warmup": 1, "repeat": 3}


@pytest.fixture(scope="module")
def cuda_rec(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return record_sample(tmp_path_factory.mktemp("service-gpu"), "cuda", n=1 << 16)
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))


def test_gpu_stream_with_illegal_address_and_hang(cuda_rec: Path) -> None:
    rec = load_recording(cuda_rec)
    with Client(config=ServiceConfig(backend="cuda", workers=1)) as client:
        client.load([cuda_rec])
        (worker,) = client.workers()
        assert worker["cuda_visible_devices"] is not None
        assert client.evaluate(rec, **PROTOCOL).ok
        variants = good_variants(rec, 98)
        where = random.Random(7).sample(range(100), 2)
        for index, name in sorted(zip(where, ("illegal_address", "hang"))):
            variants.insert(index, fault(rec, name))
        results = [p.result() for p in [client.submit(rec, v, **PROTOCOL) for v in variants]]
        crash, hang = results[where[0]], results[where[1]]
        assert crash.status is Status.RUNTIME_FAILED and "illegal" in crash.message.lower()
        assert hang.status is Status.TIMEOUT
        assert all(m.ok for i, m in enumerate(results) if i not in where)
        trap = client.evaluate(rec, fault(rec, "trap"), **PROTOCOL)
        assert trap.status is Status.RUNTIME_FAILED
        assert client.evaluate(rec, **PROTOCOL).ok
        assert client.metrics().worker_restarts >= 3


LAZY_CUDA = r"""
extern "C" __global__ void smooth(const double *x, double *y, long n) {
    if (n < 0) y[0] = x[0];
}
"""


def test_gpu_device_state_is_prepared_once_and_results_stay_verified(cuda_rec: Path) -> None:
    rec = load_recording(cuda_rec)
    lazy = rec.variant.with_(source=rec.source.with_code(LAZY_CUDA))
    sequence = [(None, Status.OK), (lazy, Status.WRONG_RESULT),
                (good_variants(rec, 2)[1], Status.OK), (lazy, Status.WRONG_RESULT),
                (None, Status.OK)]
    with Client(config=ServiceConfig(backend="cuda", workers=1)) as client:
        client.load([cuda_rec])
        for variant, want in sequence:
            m = client.evaluate(rec, variant, **PROTOCOL)
            assert m.status is want, m.message
        (worker,) = client.workers()
        unit = worker["device_states"]["units"][str(cuda_rec.resolve())]
        assert unit == {"prepares": 1, "reuses": len(sequence) - 1}
        assert worker["device_states"]["discarded"] == 0


def test_gpu_batches_charge_a_lost_context_to_its_candidate(cuda_rec: Path) -> None:
    """Batches of eight: the illegal address and the trap end their worker (the context is
    unusable; the result is deposited first), the other evaluations run again, OK."""
    rec = load_recording(cuda_rec)
    variants = good_variants(rec, 14)
    variants.insert(5, fault(rec, "illegal_address"))
    variants.insert(11, fault(rec, "trap"))
    with Client(config=ServiceConfig(backend="cuda", workers=1)) as client:
        client.load([cuda_rec])
        pending = client.submit_many([client.request(rec, v, **PROTOCOL) for v in variants],
                                     batch=8)
        results = [p.result() for p in pending]
    assert results[5].status is Status.RUNTIME_FAILED
    assert "illegal" in results[5].message.lower()
    assert results[11].status is Status.RUNTIME_FAILED
    assert all(m.ok for i, m in enumerate(results) if i not in (5, 11))
