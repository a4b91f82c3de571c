"""What a supervised worker keeps and when it gets ready (issue 29's cost goal), checked by
structure, never by wall time: a request carries the recording's path, not its arrays; the
worker loads each recording once and keeps it across requests; the backends a pool is told to
warm (and those it was asked for, in a replacement worker) are made before the first request;
closing a pool ends every worker (without waiting for it: a worker's exit tears down its device
context)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge import Kernel
from kernforge.core import Recording, Status
from kernforge.record import find_recordings, load_recording, record
from kernforge.replay import evaluate_variant
from kernforge.replay.isolate import REAPER, Isolation, _Worker

CODE = r"""
void twice(const double *x, double *y, long n) {
    for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
"""
N = 1 << 20  # two 8 MiB arrays: far more than any request may carry
HELD = "kernforge.replay.isolate_worker:held"


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    where = tmp_path_factory.mktemp("isolate-warm") / "rec"
    k = Kernel(CODE, "twice", backend="cpu")
    x, y = np.arange(N, dtype=np.float64), np.zeros(N)
    with record(where, kernels="twice"):
        k(x, y, np.int64(N))
    return load_recording(find_recordings(where)[0])


def test_requests_carry_the_path_and_the_worker_keeps_the_recording(
        rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[Any, ...]] = []
    request = _Worker.request

    def spy(self: _Worker, msg: tuple[Any, ...], *a: Any) -> Any:
        sent.append(msg)
        return request(self, msg, *a)

    monkeypatch.setattr(_Worker, "request", spy)
    with Isolation() as iso:
        for _ in range(3):
            m = evaluate_variant(rec, rec.variant, isolate=iso, warmup=0, repeat=1)
            assert m.status is Status.OK, m.message
        kept = iso.call(HELD)
        assert iso.call(HELD)["recordings"] == kept["recordings"]  # the same objects
        assert kept["argv"] == sys.argv  # provenance written there names this command
        assert iso.started == 1
    evaluations = [msg for msg in sent if msg[0] == "evaluate"]
    assert len(evaluations) == 3
    assert all(len(pickle.dumps(msg)) < 64 << 10 for msg in evaluations)  # vs 16 MiB of arrays
    assert rec.nbytes >= 16 << 20
    assert list(kept["recordings"]) == [str(Path(rec.path).resolve())]


def test_a_pool_makes_the_backends_it_is_told_to_warm_before_the_first_request() -> None:
    with Isolation(warm=("cpu", "cpu")) as iso:
        assert iso.warm == ("cpu",)
        assert iso.call(HELD)["backends"] == ["cpu"]  # the first request it reads
    with Isolation() as iso:
        assert iso.call(HELD)["backends"] == []


def test_a_backend_that_cannot_start_is_left_to_the_request_that_needs_it() -> None:
    with Isolation(warm=("no-such-backend", "cpu")) as iso:
        assert iso.call(HELD)["backends"] == ["cpu"]


def test_a_replacement_worker_warms_what_the_pool_was_asked_for(rec: Recording) -> None:
    crash = rec.source.with_code(CODE.replace("    for", "    *(volatile double *)0 = 1.0;\n"
                                                         "    for"))
    with Isolation() as iso:
        assert evaluate_variant(rec, rec.variant, isolate=iso, verify_only=True).ok
        assert iso.warm == ("cpu",)
        m = evaluate_variant(rec, rec.variant.with_(source=crash), isolate=iso,
                             verify_only=True)
        assert m.status is Status.RUNTIME_FAILED
        assert iso.call(HELD)["backends"] == ["cpu"]  # ready before anything asked for it
        assert (iso.started, iso.replaced) == (2, 1)


def test_closing_a_pool_ends_every_worker() -> None:
    iso = Isolation(workers=2)
    workers = [w for w in iso._idle.queue if w is not None]
    assert len(workers) == 2
    iso.close()  # returns at once; each worker read the end of its socket and exits
    assert [w.proc.wait(timeout=60) for w in workers] == [0, 0]  # a clean exit each
    for t in threading.enumerate():  # the reapers remove the pool's files, then its folder
        if t.name == REAPER:
            t.join(timeout=60)
    assert not iso._dir.exists()


def test_closing_a_pool_while_a_request_runs_ends_that_worker_too() -> None:
    iso = Isolation(workers=1)
    (worker,) = [w for w in iso._idle.queue if w is not None]
    busy = threading.Thread(target=iso.call, args=("time:sleep", 1.0))
    busy.start()
    while iso._idle.qsize():  # the request has taken the worker
        threading.Event().wait(0.01)
    iso.close()  # nothing idle to close yet: the request hands its worker back after this
    busy.join(timeout=60)
    assert worker.proc.wait(timeout=60) == 0
    for t in threading.enumerate():
        if t.name == REAPER:
            t.join(timeout=60)
    assert not iso._dir.exists()


def test_a_process_that_exits_right_after_closing_leaves_nothing_behind() -> None:
    code = ("from kernforge.replay.isolate import Isolation\n"
            "iso = Isolation(workers=2)\n"
            "iso.call('os:getpid')\n"
            "iso.close()\n"
            "print(iso._dir)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, timeout=120).stdout.strip()
    assert out and not Path(out).exists()  # the reapers ran before the interpreter ended


def test_the_worker_reuses_the_device_state_and_fails_a_candidate_that_changes_it(
        rec: Recording, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's evaluation in this process: the prologue is uploaded once for evaluations
    of one recording; an evaluation during which a pristine copy changed (its candidate wrote
    outside its arguments) fails as RUNTIME_FAILED, and the next one is verified on a state
    made afresh."""
    from kernforge.backends import get_backend
    from kernforge.replay import engine
    from kernforge.replay import isolate_worker as worker
    from kernforge.replay.devstate import DeviceStates

    be = get_backend("cpu")
    uploads: list[int] = []
    to_device = be.to_device

    def counted(array: np.ndarray) -> Any:
        uploads.append(array.nbytes)
        return to_device(array)

    monkeypatch.setattr(be, "to_device", counted)
    monkeypatch.setattr(worker, "_STATES", DeviceStates())
    path = str(Path(rec.path).resolve())
    monkeypatch.setitem(worker._RECORDINGS, path, rec)

    class Conn:
        def send(self, msg: Any) -> None:
            pass

    def evaluate() -> Any:
        m, recycle = worker.evaluate(Conn(), path, rec.variant, "cpu", {"warmup": 0, "repeat": 1})
        assert not recycle
        return m

    assert evaluate().status is Status.OK
    first = len(uploads)
    assert first > 0
    for _ in range(2):
        assert evaluate().status is Status.OK
    assert len(uploads) == first  # nothing uploaded again
    assert worker.held()["states"]["reuses"] == 2

    real = engine.evaluate_variant

    def writes_outside(*a: Any, **kw: Any) -> Any:
        m = real(*a, **kw)
        kw["state"].pristine["x"][7] = -1.0  # as a candidate writing past its buffers might
        return m

    monkeypatch.setattr(engine, "evaluate_variant", writes_outside)
    bad = evaluate()
    assert bad.status is Status.RUNTIME_FAILED and "wrote outside its arguments" in bad.message
    monkeypatch.setattr(engine, "evaluate_variant", real)
    assert evaluate().status is Status.OK  # a state made afresh, not the changed one
    assert len(uploads) > first and worker.held()["states"]["discarded"] == 1
