"""Fixtures shared across the test packages: the fake CUDA driver
(:mod:`kernforge.testing.fakedriver`) and recording its application."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernforge.pipeline.run_app import record_command
from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda, build


@pytest.fixture(scope="session", autouse=True)
def own_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The user's data directory (an adopted dispatch table) is the session's own: a table
    the developer adopted does not change what the tests dispatch."""
    path = tmp_path_factory.mktemp("data")
    before = os.environ.get("KERNFORGE_DATA_DIR")
    os.environ["KERNFORGE_DATA_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("KERNFORGE_DATA_DIR", None)
    else:
        os.environ["KERNFORGE_DATA_DIR"] = before


@pytest.fixture(scope="session")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeCuda:
    """The fake libcuda, its kernels and its application, built once per run."""
    return build(tmp_path_factory.mktemp("fakecuda"))


@pytest.fixture(scope="session")
def interposer_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interposer library, built once per run."""
    return interposer.build(tmp_path_factory.mktemp("interposer"))


@pytest.fixture(scope="session")
def seed_cache(interposer_lib: Path) -> Callable[[Path], Path]:
    """``seed_cache(folder)``: ``folder`` made a kernforge cache that holds the run's
    interposer, which :func:`kernforge.record.interposer.build` finds there instead of building
    it again (a module's own cache, without a build of its own)."""
    def seed(folder: Path) -> Path:
        (folder / "interposer").mkdir(parents=True, exist_ok=True)
        shutil.copy2(interposer_lib, folder / "interposer" / interposer_lib.name)
        return folder
    return seed


@pytest.fixture
def on_fake(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    """The fake driver is the test's libcuda (``LD_LIBRARY_PATH``), nothing preloaded."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake.libdir))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return fake


@pytest.fixture
def on_fake_nvrtc(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeCuda:
    """:func:`on_fake` with the fake NVRTC and nvcc as the ones kernforge builds sources with,
    and a kernforge cache of the test's own (built images are cached there)."""
    for k in ("LD_LIBRARY_PATH", "KERNFORGE_LIBNVRTC", "KFFAKE_NVRTC_DIR", "KERNFORGE_NVCC"):
        monkeypatch.setenv(k, fake.env[k])
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return fake


@pytest.fixture(scope="session")
def record_fake(fake: FakeCuda) -> Callable[..., tuple[int, list[Path], list[str], list[dict]]]:
    """``record_fake(out, **filters)``: ``kernforge record`` of the fake application into
    ``out`` (what :func:`record_command` returns), on the fake driver with nothing preloaded;
    the environment is restored afterwards, so module-scoped fixtures can use it."""
    def rec(out: Path, **kw: Any) -> tuple[int, list[Path], list[str], list[dict]]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("LD_LIBRARY_PATH", str(fake.libdir))
            mp.delenv("LD_PRELOAD", raising=False)
            return record_command(fake.command(), out, **kw)
    return rec
