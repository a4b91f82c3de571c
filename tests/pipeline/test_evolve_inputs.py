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


@pytest.mark.parametrize(("name", "text", "words"), [
    ("c.toml", "garbage = [", "not valid TOML"),
    ("c.yaml", "a: [", "not valid YAML"),
    ("c.toml", "[evolve]\nmax_iterations = [1]\n", "evolve"),
    ("c.toml", "contract = 3\n", "contract must be text"),
    ("c.toml", "[[proposers]]\nkind = \"offline\"\nweight = -1\n", "weight"),
    ("c.toml", "[tuner]\nnope = 1\n", "tuner"),
])
def test_every_config_error_says_what_to_do(tmp_path: Path, name: str, text: str,
                                           words: str) -> None:
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=words) as exc:
        load_config(tmp_path / name)
    assert exc.value.hint
