"""Fixtures of the application tests (see app_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.testing.fakedriver import FakeCuda, build

from .app_helpers import fake_program


@pytest.fixture(scope="session")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeCuda:
    return build(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture
def program(tmp_path: Path) -> Path:
    return fake_program(tmp_path / "src")
