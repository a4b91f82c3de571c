"""--resume without --kernels continues the kernel already under way, not a newly timed one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernforge.pipeline import evolve as evolve_mod


@pytest.fixture()
def fake(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []
    a1, b1 = SimpleNamespace(name="a1"), SimpleNamespace(name="b1")
    monkeypatch.setattr(evolve_mod, "find_recordings", lambda path: [a1, b1])
    monkeypatch.setattr(evolve_mod, "load_recording", lambda p: p)
    monkeypatch.setattr(evolve_mod, "group_by_kernel",
                        lambda recs, kernels: {"a": [a1], "b": [b1]})
    monkeypatch.setattr(evolve_mod, "_hottest", lambda groups: "a")

    def evolve_kernel(group: Any, cfg: Any, run_dir: Path, **kw: Any) -> str:
        ran.append(run_dir.name)
        return run_dir.name

    monkeypatch.setattr(evolve_mod, "evolve_kernel", evolve_kernel)
    return ran


def test_resume_continues_the_started_kernel(fake: list[str], tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "evolve.db").write_bytes(b"")
    evolve_mod.evolve_path("rec", None, tmp_path, resume=True)  # type: ignore[arg-type]
    assert fake == ["b"]  # not "a", the hottest now


def test_fresh_run_and_resume_without_a_started_kernel_pick_the_hottest(
        fake: list[str], tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "evolve.db").write_bytes(b"")
    evolve_mod.evolve_path("rec", None, tmp_path)  # type: ignore[arg-type]
    evolve_mod.evolve_path("rec", None, tmp_path / "other", resume=True)  # type: ignore[arg-type]
    assert fake == ["a", "a"]


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
