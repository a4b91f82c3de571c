"""Device state kept by a worker between requests: one prepare per unit, counted by the
worker's own metrics (``Client.workers()[i]["device_states"]``), with results still verified
on the reused state (a real one-worker service on the CPU backend)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kernforge.core import Status
from kernforge.service import Client, ServiceConfig
from kernforge.service.samples import fault, good_variants, record_sample

PROTOCOL = {"warmup": 1, "repeat": 2}
LAZY = """
void smooth(const double *restrict x, double *restrict y, long n) {
    (void)x; (void)y; (void)n;
}
"""


@pytest.fixture(scope="module")
def one(rec_path: Path) -> Iterator[Client]:
    """A service of one worker: every request lands on the same process."""
    with Client(config=ServiceConfig(workers=1, cores_per_worker=1)) as c:
        c.load([rec_path])
        yield c


def _states(client: Client) -> dict[str, Any]:
    (worker,) = client.workers()
    return dict(worker["device_states"])


def _unit(client: Client, path: Path) -> dict[str, int]:
    return dict(_states(client)["units"].get(str(path.resolve()), {"prepares": 0,
                                                                   "reuses": 0}))


def test_a_unit_is_prepared_once_per_worker(one: Client, rec_path: Path) -> None:
    first = one.evaluate(rec_path, **PROTOCOL)
    second = one.evaluate(rec_path, **PROTOCOL)
    assert first.ok and second.ok
    assert dict(second.extra)["device_state"] == "reused"
    before = _unit(one, rec_path)
    assert before["prepares"] == 1 and before["reuses"] >= 1
    assert one.evaluate(rec_path, **PROTOCOL).ok
    after = _unit(one, rec_path)
    assert after["prepares"] == 1 and after["reuses"] == before["reuses"] + 1
    states = _states(one)
    assert states["held"] == [str(rec_path.resolve())] and 0 < states["bytes"]
    assert states["limit_bytes"] == one.config.state_cache_mb << 20


def test_results_stay_correct_on_the_reused_state(one: Client, rec_path: Path, rec) -> None:
    lazy = rec.variant.with_(source=rec.source.with_code(LAZY))
    sequence = [(None, Status.OK), (fault(rec, "wrong"), Status.WRONG_RESULT),
                (good_variants(rec, 2)[1], Status.OK), (lazy, Status.WRONG_RESULT),
                (None, Status.OK), (fault(rec, "wrong"), Status.WRONG_RESULT),
                (good_variants(rec, 3)[2], Status.OK)]
    one.evaluate(rec_path, **PROTOCOL)  # the state exists before the sequence starts
    start = _unit(one, rec_path)
    for variant, want in sequence:
        m = one.evaluate(rec_path, variant, **PROTOCOL)
        assert m.status is want, (variant, m.message)
        assert dict(m.extra)["device_state"] == "reused"
    end = _unit(one, rec_path)
    assert end["prepares"] == start["prepares"]
    assert end["reuses"] == start["reuses"] + len(sequence)
    assert _states(one)["discarded"] == 0


def test_the_bound_is_the_requests(one: Client, rec_path: Path, tmp_path: Path) -> None:
    """A bound of 0 keeps nothing (each request prepares); a bound that fits one unit keeps
    the most recently used one."""
    limits = one.limits
    other = record_sample(tmp_path, n=1 << 11)
    try:
        one.limits = replace(limits, state_cache_bytes=0)
        assert one.evaluate(rec_path, **PROTOCOL).ok  # uses the held state, then drops it
        assert _states(one)["held"] == []
        before = _unit(one, rec_path)["prepares"]
        assert one.evaluate(rec_path, **PROTOCOL).ok and one.evaluate(rec_path, **PROTOCOL).ok
        assert _unit(one, rec_path)["prepares"] == before + 2
        assert _states(one)["held"] == []
        one.limits = replace(limits, state_cache_bytes=(1 << 12) * 8 * 4)  # the larger unit
        assert one.evaluate(rec_path, **PROTOCOL).ok and one.evaluate(other, **PROTOCOL).ok
        assert _states(one)["held"] == [str(other.resolve())]
        assert one.evaluate(rec_path, **PROTOCOL).ok
        assert _states(one)["held"] == [str(rec_path.resolve())]
        assert _states(one)["evictions"] >= 1
    finally:
        one.limits = limits


def test_workers_are_asked_afresh_not_read_from_dasks_cache(
        one: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """dask's ``scheduler_info()`` returns a cache that a periodic refresh without workers
    overwrites; on a loaded machine it read as no workers at all (a failure of the test
    above). The client asks the scheduler each time, so that cache cannot matter."""
    monkeypatch.setattr(one.dask, "scheduler_info", lambda *a, **k: {"workers": {}})
    assert len(one.workers()) == 1 and one.replay_workers() == 1
    assert len(one.worker_info()) == 1


def test_a_state_whose_pristine_copies_changed_is_dropped(rec) -> None:
    """In process: a candidate that wrote into the pristine copies fails, and the worker
    builds the unit's state again for the next request."""
    from kernforge.core import Measurement
    from kernforge.replay import prepare
    from kernforge.replay.devstate import state_key
    from kernforge.service.tasks import _checkin
    from kernforge.service.worker import WorkerState

    st = WorkerState()
    key = state_key(str(rec.path), rec, rec.backend)
    held = st.states.checkout(key, lambda: prepare(rec))
    assert _checkin(st, held, Measurement(Status.OK)).ok
    held = st.states.checkout(key, lambda: prepare(rec))
    assert held.reused
    held.prepared.pristine["x"][3] += 1.0  # what a stray write of a candidate would do
    m = _checkin(st, held, Measurement(Status.OK, samples=(1e-3,)))
    assert m.status is Status.RUNTIME_FAILED and "pristine" in m.message and not m.samples
    assert st.states.summary()["discarded"] == 1 and st.states.summary()["held"] == []
    held = st.states.checkout(key, lambda: prepare(rec))
    assert not held.reused and st.states.prepares[str(rec.path)] == 2
    assert st.states.checkin(held) and st.states.summary()["held"] == [str(rec.path)]
    st.release()  # worker teardown
    assert st.states.summary()["held"] == [] and st.states.summary()["bytes"] == 0


def test_the_bound_is_configured_in_mib() -> None:
    from kernforge.core import ConfigError

    assert ServiceConfig.from_mapping({"state_cache_mb": 0}).state_cache_mb == 0
    with pytest.raises(ConfigError, match="state_cache_mb"):
        ServiceConfig(state_cache_mb=-1)
