"""Fixtures of the deployment tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kernforge import deploy
from kernforge.backends import base, cupy_hooks
from kernforge.testing.fakecupy import FakeCuda, fake_module


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "reverify: keep the deployment's first-launch "
                                       "re-verification on")


@pytest.fixture(autouse=True)
def _no_reverification(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The matching and launching tests deploy variants that change the results on purpose
    (BIAS=100), to see which ran: the first-launch re-verification (deploy/reverify.py, its
    own tests in test_reverify.py) would refuse them, so it is off unless a test says
    ``@pytest.mark.reverify``."""
    if request.node.get_closest_marker("reverify") is None:
        monkeypatch.setenv("KERNFORGE_DEPLOY_VERIFY", "off")


@pytest.fixture
def cp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The CuPy stand-in (kernforge.testing.fakecupy) as ``cupy`` and the ``cuda`` backend,
    hooks installed."""
    fake = fake_module()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setitem(base._instances, "cuda", FakeCuda())
    FakeCuda.launches.clear()
    cupy_hooks.install()
    yield fake
    deploy.stop()
    cupy_hooks.uninstall()
