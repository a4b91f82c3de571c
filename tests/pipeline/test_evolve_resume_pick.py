"""--resume without --kernels continues the kernel already under way, not a newly timed one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernforge.pipeline import evolve_run


@pytest.fixture()
def groups(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two kernels, ``a`` the hotter."""
    monkeypatch.setattr(evolve_run._Kernel, "hotness",
                        lambda self: {"a": 2.0, "b": 1.0}[self.directory])
    return {k: evolve_run._Kernel([SimpleNamespace(name=f"{k}1")], k) for k in "ab"}


def test_resume_continues_the_started_kernel(groups: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "evolve.db").write_bytes(b"")
    assert list(evolve_run.pick(groups, tmp_path, kernels=None, resume=True)) == ["b"]
    # not "a", the hottest now


def test_fresh_run_and_resume_without_a_started_kernel_pick_the_hottest(
        groups: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "evolve.db").write_bytes(b"")
    assert list(evolve_run.pick(groups, tmp_path, kernels=None, resume=False)) == ["a"]
    assert list(evolve_run.pick(groups, tmp_path / "other", kernels=None,
                                resume=True)) == ["a"]
    assert list(evolve_run.pick(groups, tmp_path, kernels="*", resume=False)) == ["a", "b"]


@pytest.mark.parametrize("result", ["k-0/result.json", "native.json"])
def test_a_finished_native_evolution_is_not_measured_again(tmp_path: Path,
                                                          result: str) -> None:
    """Issue 43 item 4 for native units: their result, once written, is not re-measured (or
    overwritten) on resume; --remeasure is the explicit way. The result is the unit's
    result.json, as tuning writes it; a run written before holds native.json."""
    from kernforge.core import ConfigError
    from kernforge.pipeline.native_evolve import evolve_native

    (tmp_path / result).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / result).write_text("{}")
    unit = SimpleNamespace(name="k", path=Path("rec") / "k-0", source=None)
    with pytest.raises(ConfigError, match="--remeasure"):
        evolve_native([unit], None, tmp_path, resume=True)  # type: ignore[arg-type, list-item]
    assert (tmp_path / result).read_text() == "{}"
    with pytest.raises(ConfigError, match="no source to evolve"):  # past the guard
        evolve_native([unit], None, tmp_path, resume=True,  # type: ignore[arg-type, list-item]
                      remeasure=True)
