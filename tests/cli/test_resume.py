"""``tune``/``evolve`` ``--resume``: a run directory that does not exist, or a run database
damaged on disk, is a typed error (exit 2, the file named, what to do), never a traceback nor
a fresh run started silently."""

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
CONFIG = Path(__file__).resolve().parents[2] / "examples" / "evolve-cpu.yaml"
GARBAGE = bytes(range(256)) * 32  # what a file overwritten with something else holds


@pytest.fixture(scope="module")
def rec_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume") / "rec"
    with kernforge.record(root):
        kernforge.Kernel(SCALE, "scale", backend="cpu")(np.arange(64.0), np.zeros(64), 64)
    return root


def _command(kind: str, rec_dir: Path, out: Path, *extra: str) -> list[str]:
    if kind == "tune":
        return ["tune", str(rec_dir), "--out", str(out), "--trials", "1", "--in-process",
                *extra]
    return ["evolve", str(rec_dir), "--config", str(CONFIG), "--out", str(out),
            "--in-process", *extra]


@pytest.mark.parametrize("kind", ["tune", "evolve"])
def test_resume_of_a_directory_that_never_existed_is_an_error(
        kind: str, rec_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs" / "typo"
    assert run(*_command(kind, rec_dir, out, "--resume")) == 2
    err = capsys.readouterr().err
    assert f"--resume: {out} does not exist" in err and "drop --resume" in err
    assert not out.exists()  # no fresh run started there


def test_evolve_resume_needs_out(rec_dir: Path, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # the default --out is under runs/ here
    assert run("evolve", str(rec_dir), "--config", str(CONFIG), "--resume") == 2
    assert "--resume needs --out" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("kind", "db"), [("tune", "scale-0/study.db"),
                                          ("evolve", "scale/evolve.db")])
def test_resume_of_a_damaged_database_names_it(kind: str, db: str, rec_dir: Path,
                                               tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    path = out / db
    path.parent.mkdir(parents=True)
    path.write_bytes(GARBAGE)
    assert run(*_command(kind, rec_dir, out, "--resume")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{path.name}: not a usable" in err and "database" in err
    assert "move the file away" in err and "--out" in err
    assert path.read_bytes() == GARBAGE  # left as it was, for the user to look at
