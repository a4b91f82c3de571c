"""The same client code against a separately started scheduler: `dask scheduler` and two
`dask worker` processes (each with its nanny) on loopback."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernforge.core import Status
from kernforge.service import Client
from kernforge.service.samples import fault, good_variants

DASK = [sys.executable, "-m", "dask"]


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([*DASK, *args], stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


# end to end against a separate scheduler; the same client calls on a local cluster:
# test_service_local.py
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("dask")
    sched_file = tmp / "scheduler.json"
    procs = [_spawn(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(sched_file)], tmp / "scheduler.log")]
    try:
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sched_file.exists(), (tmp / "scheduler.log").read_text()
        for name in ("w0", "w1"):
            procs.append(_spawn(["worker", "--scheduler-file", str(sched_file),
                                 "--nthreads", "1", "--resources", "replay=1", "--name", name,
                                 "--no-dashboard", "--host", "127.0.0.1"],
                                tmp / f"{name}.log"))
        yield json.loads(sched_file.read_text())["address"]
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_the_same_client_code_runs_against_a_dask_scheduler(address: str, rec_path: Path,
                                                            rec) -> None:
    with Client(address) as client:
        client.wait_for_workers(2, timeout=60)
        client.load([rec_path])
        assert {w["name"] for w in client.workers()} == {"w0", "w1"}
        assert client.evaluate(rec, warmup=1, repeat=3).ok
        variants = good_variants(rec, 8)
        variants.insert(3, fault(rec, "segfault"))
        results = [p.result() for p in [client.submit(rec, v, warmup=1, repeat=3)
                                        for v in variants]]
        assert results[3].status is Status.RUNTIME_FAILED and "SIGSEGV" in results[3].message
        assert all(m.ok for i, m in enumerate(results) if i != 3)
        client.wait_for_workers(2, timeout=60)
        assert client.metrics().worker_restarts >= 1
