"""An unusable ``KERNFORGE_CACHE_DIR`` is bad input: exit 2, the variable named with what to
do, never "this is a kernforge bug" (the isolated worker carries the typed error back)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kernforge

from .cli_helpers import run

SCALE = r"""
void scale(const double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
"""


@pytest.mark.parametrize("isolation", [[], ["--in-process"]], ids=["isolated", "in-process"])
def test_replay_with_an_unusable_cache_dir_exits_2(
        isolation: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with kernforge.record(tmp_path / "rec"):
        kernforge.Kernel(SCALE, "scale", backend="cpu")(np.arange(64.0), np.zeros(64), 64)
    capsys.readouterr()
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(blocker))
    assert run("replay", str(tmp_path / "rec"), *isolation) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"KERNFORGE_CACHE_DIR={str(blocker)!r}" in err and "writable directory" in err
    assert "kernforge bug" not in err
