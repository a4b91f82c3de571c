"""One entry point per command takes units of both kinds (issue 41, item 1): a directory that
holds a recording (format v1, the null backend) beside a native unit (the fake driver) is
loaded, replayed and described by :mod:`kernforge.pipeline.units` without the CLI; what it
says goes to the caller's Notes, never to the terminal."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.backends import Kernel
from kernforge.core import RecordingError
from kernforge.pipeline.units import (
    Notes,
    describe_units,
    export_units,
    load_units,
    replay_units,
)
from kernforge.record import record
from kernforge.testing.fakedriver import FakeCuda

AXPY = '''
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
'''


@pytest.fixture(scope="module")
def mixed(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake program's heat kernel (native) and a Python kernel (v1) in one directory."""
    out = tmp_path_factory.mktemp("mixed") / "rec"
    status, native, problems, _ = record_fake(out, max_instances=1, kernels="*heat*")
    assert status == 0 and len(native) == 1 and not problems
    with record(out):
        Kernel(AXPY, "axpy", backend="null")(np.arange(4.0), np.ones(4), 2.0, 4)
    return out


@contextlib.contextmanager
def in_process(_: object) -> Iterator[None]:
    yield None


class Heard:
    """Everything a pipeline said, by kind."""

    def __init__(self) -> None:
        self.said: list[str] = []
        self.damaged: list[str] = []
        self.skipped: list[str] = []

    def notes(self) -> Notes:
        return Notes(say=self.said.append, skipped=self.skipped.append,
                     damaged=lambda why: self.damaged.append(str(why)))


def test_both_kinds_are_loaded_described_and_replayed(
        on_fake: FakeCuda, mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    heard = Heard()
    units = load_units(mixed, notes=heard.notes())
    assert len(units.recordings) == 1 and len(units.native) == 1
    assert units.backends == ["null"]
    kinds = sorted(d["backend"] for d in describe_units(units))
    assert kinds == ["driver", "null"]
    rows = replay_units(units, repeat=2, warmup=0, isolation=in_process, notes=heard.notes())
    assert [r.kernel for r in rows] == ["axpy", units.native[0].name]
    assert all(r.measurement.ok for r in rows), [r.measurement.message for r in rows]
    assert all("cache" in r.info() for r in rows)
    assert [bool(r.placement) for r in rows] == [False, True]  # at its recorded addresses
    assert set(rows[1].info()) == {"relocated", "refusals", "app_time_ms", "cache"}
    assert capsys.readouterr() == ("", "")  # the library printed nothing
    assert heard.damaged == []


def test_a_damaged_unit_is_told_to_the_caller(on_fake: FakeCuda, mixed: Path,
                                              tmp_path: Path) -> None:
    copy = tmp_path / "rec"
    shutil.copytree(mixed, copy)
    bad = next(p for p in copy.iterdir() if p.name.startswith("heat"))
    (bad / "manifest.json").write_text("garbage")
    heard = Heard()
    units = load_units(copy, notes=heard.notes())
    assert units.native == [] and len(units.recordings) == 1
    assert len(heard.damaged) == 1 and bad.name in heard.damaged[0]
    only = tmp_path / "only"
    shutil.copytree(bad, only / bad.name)
    with pytest.raises(RecordingError):  # the one unit named is loaded strictly
        load_units(only / bad.name, notes=heard.notes())


def test_export_of_a_run_without_wins_says_why_and_writes_nothing(tmp_path: Path) -> None:
    """A native run whose one unit was not kept: nothing exported, the reason to Notes."""
    from kernforge.core.jsonio import sign, write_json_atomic

    run = tmp_path / "run"
    run.mkdir()
    write_json_atomic(run / "native.json", sign({
        "format": "kernforge-native-tune", "version": 1, "noise_band": 0.02,
        "units": [{"unit": "u-0", "best": None, "refused": "no configuration was faster "
                   "than the recorded one"}]}))
    heard = Heard()
    done = export_units(run, None, min_speedup=1.0, band=0.02, notes=heard.notes())
    assert done.native and done.spec is None and not (run / "deploy.json").exists()
    assert heard.skipped == ["u-0: no configuration was faster than the recorded one"]
