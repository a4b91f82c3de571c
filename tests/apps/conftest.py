"""Fixtures of the application tests (see app_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .app_helpers import fake_program


@pytest.fixture
def program(tmp_path: Path) -> Path:
    # a 0.25 s sleep the "faster" agent cuts to a quarter: a gain whose per-round ratio
    # varies little, so the end-to-end verdict is "faster" on a shared machine too
    return fake_program(tmp_path / "src", sleep=0.25)
