"""The cache root: $KERNFORGE_CACHE_DIR, else $XDG_CACHE_HOME/kernforge, else ~/.cache/kernforge."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.backends.cpu import cache_dir as cpu_cache
from kernforge.core.errors import ConfigError
from kernforge.core.paths import cache_folder, cache_path, cache_root
from kernforge.service.daemon import default_state
from kernforge.stencil.emulate import cache_dir as emulate_cache


def test_cache_root_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KERNFORGE_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "kernforge"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "kernforge"
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "kf"))
    assert cache_path("cubins") == tmp_path / "kf" / "cubins"
    # every cache of the package lives under the one root
    assert cpu_cache() == tmp_path / "kf" / "cpu"
    assert emulate_cache() == tmp_path / "kf" / "emulate"
    assert default_state() == tmp_path / "kf" / "serve.json"


@pytest.mark.parametrize("bad", ["a-file", "/proc/nope"])
def test_an_unusable_cache_root_is_a_config_error_naming_the_variable(
        bad: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if bad == "a-file":
        (tmp_path / "a-file").write_text("not a folder")
        bad = str(tmp_path / "a-file")
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", bad)
    with pytest.raises(ConfigError) as info:
        cpu_cache()
    assert f"KERNFORGE_CACHE_DIR={bad!r}" in str(info.value)
    assert info.value.exit_code == 2 and "writable directory" in (info.value.hint or "")


def test_cache_folder_is_created(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "new" / "root"))
    assert cache_folder("cpu").is_dir()
