"""``kernforge inspect``, ``replay`` and ``integrity validate`` take units of both kinds on one
path (issue 41, item 1): a directory holding a recording (the null backend) beside a native unit
(the fake driver) is described in one table and replayed into one table and one JSON list, and
``integrity validate`` gives a native unit the verdict, output and exit status it gives every
unit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends import Kernel
from kernforge.cli.main import main
from kernforge.record import record
from kernforge.testing.fakedriver import FakeCuda

AXPY = '''
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
'''


@pytest.fixture
def mixed(on_fake: FakeCuda, recorded: Path, tmp_path: Path) -> Path:
    out = tmp_path / "rec"
    shutil.copytree(recorded / "heat-0", out / "heat-0")
    with record(out):
        Kernel(AXPY, "axpy", backend="null")(np.arange(4.0), np.ones(4), 2.0, 4)
    return out


def test_both_kinds_are_inspected_in_one_table(mixed: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(mixed), "--args"]) == 0
    out = capsys.readouterr().out
    assert "2 recorded launch(es)" in out and "native launch" not in out
    table = out.split("\n  ")[0]
    assert "heat-0" in table and "driver" in table and "1 of 2 regions" in table
    assert "axpy-0" in table and "null" in table
    assert "heat-0: parameters (32 B)" in out and "axpy-0: arguments" in out


def test_both_kinds_replay_into_one_table_and_one_json(
        mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js = tmp_path / "r.json"
    assert main(["replay", str(mixed), "--in-process", "--repeat", "2", "--json", str(js)]) == 0
    out = capsys.readouterr().out
    assert out.count("replay of") == 1 and "native units" not in out
    table = out.split("\n  ")[0]
    assert "axpy-0" in table and "heat-0" in table and "placed" in table
    rows = {r["unit"]: r for r in json.loads(js.read_text())}
    assert set(rows) == {"axpy-0", "heat-0"} and all(r["status"] == "OK" for r in rows.values())
    assert "relocated" not in rows["axpy-0"] and rows["heat-0"]["relocated"] == []
    assert all("cache" in r for r in rows.values())


def test_a_native_unit_is_validated_as_every_unit_is(
        mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["integrity", "validate", str(mixed / "heat-0"), "--tolerance",
                 "rel:1e-6"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("accepted heat-0: OK")
    assert "verified: 2 region(s) under rel:1e-06" in out
    for bad in (["--tolerance", "v=rel:1e-6"], ["--define", "N=1"], ["--seed", "3"]):
        assert main(["integrity", "validate", str(mixed / "heat-0"), *bad]) == 2, bad
        assert "native unit" in capsys.readouterr().err
