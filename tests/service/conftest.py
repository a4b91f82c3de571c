"""Fixtures of the service tests: a recorded CPU kernel and a local service (2 workers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernforge.record import load_recording
from kernforge.service import Client, ServiceConfig
from kernforge.service.samples import record_sample


@pytest.fixture(scope="session")
def rec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_sample(tmp_path_factory.mktemp("service-rec"))


@pytest.fixture(scope="session")
def rec(rec_path: Path):
    return load_recording(rec_path)


@pytest.fixture(scope="module")
def client(rec_path: Path) -> Iterator[Client]:
    """A local service of two single-core workers, owned by the client."""
    with Client(config=ServiceConfig(workers=2, cores_per_worker=1)) as c:
        c.load([rec_path])
        yield c
