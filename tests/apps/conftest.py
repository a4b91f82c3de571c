"""Fixtures of the application tests (see app_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .app_helpers import fake_program


@pytest.fixture
def program(tmp_path: Path) -> Path:
    # a 0.25 s sleep the "faster" agent cuts to a quarter: a gain whose per-round ratio
    # varies little, so the end-to-end verdict is "faster" on a shared machine too
    return fake_program(tmp_path / "src", sleep=0.25)


@pytest.fixture(scope="module")
def heat_unit(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
              ) -> Path:
    """The fake driver's heat program recorded once per module: its first launch's unit."""
    out = tmp_path_factory.mktemp("rec")
    status, _, problems, _ = record_fake(out, max_instances=1)
    assert status == 0 and not problems
    return out / "heat-0"
