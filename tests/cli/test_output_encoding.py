"""Issue 43 item 8: a non-ASCII path under PYTHONIOENCODING=ascii gave a traceback; output the
terminal's encoding cannot show is written escaped instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kernforge

SCALE = r"""
void scale(const double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
"""
SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture(scope="module")
def accented(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("enc") / "r\u00e9sultats"
    with kernforge.record(root):
        kernforge.Kernel(SCALE, "scale", backend="cpu")(np.arange(8.0), np.zeros(8), 8)
    return root


@pytest.mark.parametrize("command", [
    ["inspect"],
    pytest.param(["replay", "--in-process", "--repeat", "1"], marks=pytest.mark.slow)])
def test_a_non_ascii_path_under_an_ascii_terminal(accented: Path, command: list[str]) -> None:
    env = dict(os.environ, PYTHONIOENCODING="ascii",
               PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "kernforge", command[0], str(accented),
                        *command[1:]], capture_output=True, timeout=120, env=env, check=False)
    out, err = r.stdout.decode("ascii"), r.stderr.decode("ascii")  # nothing but ASCII
    assert r.returncode == 0, out + err
    assert "Traceback" not in err and "UnicodeEncodeError" not in err
    assert "r\\xe9sultats" in out and "scale-0" in out
