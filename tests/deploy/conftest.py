"""Fixtures of the deployment tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fake_cupy import FakeCuda, fake_module

from kernforge import deploy
from kernforge.backends import base, cupy_hooks


@pytest.fixture
def cp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The CuPy stand-in of fake_cupy.py as ``cupy`` and the ``cuda`` backend, hooks installed."""
    fake = fake_module()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(base._instances, "cuda", FakeCuda())
    FakeCuda.launches.clear()
    cupy_hooks.install()
    yield fake
    deploy.stop()
    cupy_hooks.uninstall()
