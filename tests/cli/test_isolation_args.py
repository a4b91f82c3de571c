"""``--eval-timeout`` and ``--compile-timeout``: what the supervisor's limits become, bad
values refused by the parser, and the stencil check's first-cell limit following them."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from kernforge.cli.isolation import add_isolation_args, limits_of
from kernforge.forge.check_isolated import IsolatedCheck
from kernforge.replay.isolate import Limits


def _parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kernforge x")
    add_isolation_args(p)
    return p.parse_args(list(argv))


def test_defaults_and_each_option() -> None:
    assert limits_of(_parse()) == Limits()
    got = limits_of(_parse("--eval-timeout", "5", "--compile-timeout", "40"))
    assert (got.min_timeout_s, got.first_timeout_s, got.compile_timeout_s) == (5.0, 60.0, 40.0)
    assert got.validate_timeout_s == Limits().validate_timeout_s
    only = limits_of(_parse("--compile-timeout", "7.5"))
    assert only.compile_timeout_s == 7.5 and only.min_timeout_s == Limits().min_timeout_s


@pytest.mark.parametrize(("bad", "said"), [("0", "out of range: give a number at least 0.001"),
                                         ("-3", "out of range"), ("nan", "out of range"),
                                         ("soon", "'soon' is not a number")])
def test_a_bad_value_is_refused_by_the_parser(bad: str, said: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for flag in ("--eval-timeout", "--compile-timeout"):
        with pytest.raises(SystemExit) as exc:
            _parse(flag, bad)
        assert exc.value.code == 2
        assert said in capsys.readouterr().err


def test_the_stencil_check_first_cell_limit_follows_the_options() -> None:
    def first_cell(*argv: str) -> float:
        return IsolatedCheck(SimpleNamespace(limits=limits_of(_parse(*argv))))._limit()

    assert first_cell() == Limits().compile_timeout_s  # 300 s: compiles may be slow
    assert first_cell("--eval-timeout", "2", "--compile-timeout", "10") == 24.0
    assert first_cell("--compile-timeout", "500") == 500.0
