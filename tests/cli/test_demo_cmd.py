"""``kernforge demo``'s verdict (in process, the pipeline replaced by a canned result)."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernforge.cli import demo_cmd
from kernforge.core import Status


def _result(substituted: int) -> Any:
    e2e = SimpleNamespace(spec=Path("deploy.json"), identical=True, winners=[], plain_s=[2.0],
                          deployed_s=[1.0], speedup=2.0, ratios=[2.0], substituted=substituted)
    return SimpleNamespace(
        app=SimpleNamespace(script="heat3d_cpu.py", backend="cpu", wrong_label="x"),
        baseline=[], tuned=None, wrong=SimpleNamespace(status=Status.WRONG_RESULT,
                                                       failed_checks=[]),
        wrong_unit="heat_step-0", evolved=[], e2e=e2e, run_dir=Path("run"))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    demo_cmd.register(p.add_subparsers())
    return p.parse_args(["demo"])


@pytest.mark.parametrize("substituted", [0, 3])
def test_demo_fails_when_no_launch_was_replaced(
        substituted: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(demo_cmd, "run_demo", lambda *a, **k: _result(substituted))
    rc = demo_cmd.run(_args())
    out = capsys.readouterr().out
    if substituted:
        assert rc == 0 and "end-to-end speedup 2.000x" in out
    else:
        assert rc == 1 and "replaced no launch" in out
        assert "end-to-end speedup 2.000x" not in out
