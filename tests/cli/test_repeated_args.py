"""``--tolerance``, ``--opt`` and ``--define`` as users mistype them (replay, tune and
integrity validate share the parsers): a mode written with ``=`` (``abs=1e-9``) was read as a
buffer named ``abs`` and reported as "cannot parse tolerance '1e-9'"; a buffer, option or
define given twice silently kept the last."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernforge.cli.replay_cmd import tolerance_overrides
from kernforge.core import ConfigError, Tolerance

from .cli_helpers import run


@pytest.mark.parametrize("cmd", [["replay"], ["tune", "--out", "t"]], ids=lambda c: c[0])
def test_a_mode_written_with_an_equals_sign_is_refused_saying_so(
        cmd: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before the recordings are read (integrity validate reads its unit first)."""
    assert run(cmd[0], str(tmp_path / "rec"), *cmd[1:], "--tolerance", "abs=1e-9") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--tolerance abs=1e-9: abs is a tolerance mode, and its value follows a colon" in err
    assert "write --tolerance abs:1e-9 for every written buffer" in err


def test_a_buffer_given_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="names buffer 'v' twice .abs:1e-9 and rel:1e-3."):
        tolerance_overrides(["v=abs:1e-9", "v=rel:1e-3"])


def test_the_forms_that_hold_still_parse() -> None:
    assert tolerance_overrides(["abs:1e-9"]) == Tolerance("abs", atol=1e-9)
    assert tolerance_overrides(["v=abs:1e-9", "w=rel:1e-3,1e-9"]) == {
        "v": Tolerance("abs", atol=1e-9), "w": Tolerance("rel", rtol=1e-3, atol=1e-9)}
    # a buffer that happens to be called norm, with a full spec
    assert tolerance_overrides(["norm=abs:1e-6"]) == {"norm": Tolerance("abs", atol=1e-6)}


def test_evolve_refuses_a_tolerance_its_recordings_would_ignore(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """evolve's --tolerance reaches native units only: on kernforge.Kernel recordings it was
    dropped without a word, the candidates verified bitwise all the same."""
    import numpy as np

    import kernforge

    src = 'def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:\n' \
          '    y[:n] = a * x[:n] + y[:n]\n'
    with kernforge.record(tmp_path / "rec"):
        kernforge.Kernel(src, "axpy", backend="null")(np.ones(8), np.zeros(8), 2.0, 8)
    config = Path(__file__).resolve().parents[2] / "examples" / "evolve-cpu.yaml"
    assert run("evolve", str(tmp_path / "rec"), "--config", str(config), "--out",
               str(tmp_path / "evo"), "--tolerance", "rel:1e-6") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--tolerance rel:1e-6: applies to native units" in err
    assert "kernforge.Kernel(..., tolerance=" in err
    assert not list((tmp_path / "evo").glob("*/result.json"))


@pytest.mark.parametrize("what", ["opt", "define"])
def test_an_option_or_define_given_twice_is_refused(
        what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--opt opt_level=O3 --opt opt_level=O1 replayed O1 alone, without a word."""
    assert run("replay", str(tmp_path / "rec"), f"--{what}", "K=1", f"--{what}", "K=2") == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--{what} K is given twice (K=1 and K=2)" in err and f"--{what} K=VALUE" in err
