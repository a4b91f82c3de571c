"""What evolve says about inputs a user may get wrong: a directory given as the config file,
a recordings directory with no units."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.core import ConfigError
from kernforge.pipeline.evolve import group_by_kernel
from kernforge.pipeline.evolve_config import load_config


def test_a_directory_as_the_config_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory") as exc:
        load_config(tmp_path)
    assert "--config FILE" in (exc.value.hint or "")
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")


def test_no_recorded_units_is_named_as_such() -> None:
    with pytest.raises(ConfigError, match="no recorded units to evolve") as exc:
        group_by_kernel([])
    assert "kernforge record" in (exc.value.hint or "")
