"""Fixtures of the application tests (see app_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .app_helpers import fake_program


@pytest.fixture
def program(tmp_path: Path) -> Path:
    return fake_program(tmp_path / "src")
