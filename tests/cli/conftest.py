"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def recorded(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    """The fake program's heat kernel recorded once (one launch) on the fake driver."""
    out = tmp_path_factory.mktemp("rec")
    status, _, problems, _ = record_fake(out, max_instances=1, kernels="*heat*")
    assert status == 0 and not problems
    return out
