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


TINY = """
evolve: {seed: 1, max_iterations: 1, eval_slots: 1, patience: 1}
proposers: [{kind: offline, weight: 1}]
tuner: {trials: 1, preset: quick, repeat: 2}
"""


@pytest.mark.parametrize(("kind", "result"), [("tune", "scale-0/result.json"),
                                              ("evolve", "scale/scale-0/result.json")])
def test_resume_of_a_finished_run_reports_it_and_measures_nothing(
        kind: str, result: str, rec_dir: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 4: --resume on a finished study wrote a new result.json over the old
    one (1.421x became REJECTED). Now it is reported and left as it was; --remeasure
    measures again and keeps the earlier result beside the new one."""
    out = tmp_path / "run"
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)

    def command(*extra: str) -> list[str]:
        if kind == "tune":
            return _command(kind, rec_dir, out, "--repeat", "2", *extra)
        return ["evolve", str(rec_dir), "--config", str(config), "--out", str(out),
                "--in-process", *extra]

    assert run(*command()) in (0, 1)
    path = out / result
    before, inode = path.read_bytes(), path.stat().st_ino
    capsys.readouterr()
    assert run(*command("--resume")) == 0
    text = capsys.readouterr().out
    assert "finished earlier" in text and "not measured again" in text and "--remeasure" in text
    assert path.stat().st_ino == inode and path.read_bytes() == before  # not rewritten
    assert run(*command("--resume", "--remeasure")) in (0, 1)
    assert (path.parent / "result.earlier-1.json").read_bytes() == before
    assert path.is_file() and path.stat().st_ino != inode


def test_the_summary_of_a_resumed_tune_names_the_units_finished_earlier(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The summary table and its geometric mean of a resumed run left out the units that
    had finished earlier, without a word: a headline over a subset read as the run's."""
    rec = tmp_path / "rec"
    with kernforge.record(rec):
        kernforge.Kernel(SCALE, "scale", backend="cpu")(np.arange(64.0), np.zeros(64), 64)
        kernforge.Kernel(SCALE.replace("scale", "twice"), "twice", backend="cpu")(
            np.arange(64.0), np.zeros(64), 64)
    out = tmp_path / "run"
    assert run(*_command("tune", rec, out, "--repeat", "2", "--kernels", "scale")) == 0
    capsys.readouterr()
    assert run(*_command("tune", rec, out, "--repeat", "2", "--resume")) == 0
    text = capsys.readouterr().out
    assert "tuning twice-0" in text
    assert "1 unit(s) finished earlier (scale-0) are not in this summary" in text


@pytest.mark.parametrize("kind", ["tune", "evolve"])
def test_remeasure_needs_resume(kind: str, rec_dir: Path, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    assert run(*_command(kind, rec_dir, tmp_path / "run", "--remeasure")) == 2
    assert "add --resume" in capsys.readouterr().err


def test_ctrl_c_prints_the_command_that_resumes(rec_dir: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 43 item 8: Ctrl-C printed "interrupted" with no hint to resume."""
    from kernforge.pipeline import tune_run

    def interrupted(*a: object, **k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_run, "tune_recording", interrupted)
    monkeypatch.chdir(tmp_path)  # the default --out is runs/tune-<date> here
    assert run("tune", str(rec_dir), "--trials", "1", "--in-process") == 130
    err = capsys.readouterr().err
    assert err.startswith("interrupted")
    line = err.split("to go on: ", 1)[1].strip()
    assert line.startswith(f"kernforge tune {rec_dir} --trials 1 --in-process --out runs/tune-")
    assert line.endswith(" --resume")
    out = tmp_path / line.split("--out ")[1].split()[0]
    assert out.is_dir()  # the directory the command names is the one the run wrote
    assert run("tune", str(rec_dir), "--out", str(out), "--resume", "--in-process") == 130
    again = capsys.readouterr().err.split("to go on: ", 1)[1].strip()
    assert again.count("--resume") == 1 and again.count("--out") == 1
    assert run("inspect", str(rec_dir)) == 0  # not resumable: no hint (and no interrupt)
