"""Recordings written before the unit model (issue 41, item 1) stay readable: a format-v1
recording (tests/data/v1, the null backend) and a format-v2 native unit (tests/data/native_v2,
the fake driver), both committed as written by the code of that time, are loaded, described
exactly as then (tests/data/units_describe.json) and replayed correct through the one path
every command takes (:mod:`kernforge.pipeline.units`)."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernforge.core import Unit
from kernforge.pipeline.units import describe_units, load_units, replay_units
from kernforge.testing.fakedriver import FakeCuda

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "units_describe.json"


@pytest.fixture
def on_disk(tmp_path: Path) -> Path:
    """Both committed units in one directory (a copy: replaying keeps a cache choice)."""
    out = tmp_path / "rec"
    shutil.copytree(DATA / "v1" / "axpy-0", out / "axpy-0")
    shutil.copytree(DATA / "native_v2" / "heat-0", out / "heat-0")
    return out


@contextlib.contextmanager
def in_process(_: object) -> Iterator[None]:
    yield None


def described(where: Path) -> list[dict[str, Any]]:
    """``inspect --json`` of the units, their paths relative to ``where``."""
    out = json.loads(json.dumps(describe_units(load_units(where)), default=str))
    for d in out:
        d["path"] = str(Path(d["path"]).relative_to(where))
    return out


def test_committed_units_are_described_as_when_they_were_written(on_disk: Path) -> None:
    now, then = described(on_disk), json.loads(GOLDEN.read_text("utf-8"))
    assert now == then
    assert [list(d) for d in now] == [list(d) for d in then]  # the keys in the same order


def test_committed_units_are_units_of_one_model(on_disk: Path) -> None:
    units = load_units(on_disk)
    assert all(isinstance(u, Unit) for u in units.every)
    held = {u.unit: (u.kernel, u.backend, sorted(u.holds), u.nbytes) for u in units.every}
    assert held == {"axpy-0": ("axpy", "null", ["source"], 64),
                    "heat-0": ("heat", "driver", ["image"], 1024)}
    assert [u.unit for u in units.every if u.matches("hea*")] == ["heat-0"]


def test_committed_units_replay_correct(on_fake: FakeCuda, on_disk: Path) -> None:
    units = load_units(on_disk)
    assert [u.path.name for u in units.recordings] == ["axpy-0"]
    assert [u.path.name for u in units.native] == ["heat-0"]
    rows = replay_units(units, repeat=2, warmup=0, isolation=in_process)
    assert [(r.unit, r.kernel) for r in rows] == [("axpy-0", "axpy"), ("heat-0", "heat")]
    assert all(r.measurement.ok for r in rows), [r.measurement.message for r in rows]


def test_a_native_json_of_a_run_before_result_json_still_exports(on_disk: Path,
                                                                  tmp_path: Path) -> None:
    """Tuning runs wrote their native units' results into one RUN/native.json (format
    kernforge-native-tune, version 1) before each unit had its result.json: export reads it,
    signed and unaltered, as it did; an altered one is refused."""
    from kernforge.core import ConfigError
    from kernforge.core.jsonio import sign, write_json_atomic
    from kernforge.deploy.native import read_spec
    from kernforge.pipeline.units import export_units

    run = tmp_path / "run"
    run.mkdir()
    unit = {"unit": str(on_disk / "heat-0"), "kernel": "heat", "name": "heat",
            "best": {"block": [64, 1, 1], "jit": {}, "carveout": None},
            "best_label": "block=64x1x1", "speedup": 1.31, "ci": [1.25, 1.36],
            "medians": [2.0e-6, 1.5e-6], "win": True, "refused": None, "notes": []}
    doc = sign({"format": "kernforge-native-tune", "version": 1, "noise_band": 0.02,
                "units": [unit]})
    write_json_atomic(run / "native.json", doc)
    done = export_units(run, None, min_speedup=1.0, band=0.02)
    assert done.native and done.spec is not None and done.entries == 1
    (entry,) = read_spec(done.spec).entries
    assert entry["name"] == "heat" and entry["evidence"]["speedup"] == 1.31, entry
    write_json_atomic(run / "native.json", {**doc, "units": [{**unit, "speedup": 9.0}]})
    with pytest.raises(ConfigError, match="altered"):
        export_units(run, None, min_speedup=1.0, band=0.02)


def test_an_evolutions_native_json_is_read_beside_the_results_of_one_format(
        on_disk: Path, tmp_path: Path) -> None:
    """Evolution wrote a native kernel's result as RUN/<kernel>/native.json before it wrote
    the result every unit's tuning writes (RUN/<kernel>/<unit>/result.json): export of the
    run (or of a directory holding a tuning run and an evolution run beside it) still reads
    it; where a tuning's result and an evolution's name the same unit, the faster is kept and
    the other named."""
    from kernforge.core.jsonio import sign, write_json_atomic
    from kernforge.deploy.native import read_spec
    from kernforge.pipeline.notes import Notes
    from kernforge.pipeline.units import export_units

    base = tmp_path / "base"
    (base / "evolve" / "heat").mkdir(parents=True)
    evolved = {"unit": str(on_disk / "heat-0"), "kernel": "heat", "name": "heat",
               "best": {"block": [128, 1, 1], "jit": {}, "carveout": None},
               "best_label": "block=128x1x1", "speedup": 1.5, "ci": [1.4, 1.6],
               "medians": [2.0e-6, 1.3e-6], "win": True, "refused": None,
               "notes": ["source evolved (kernforge evolve)"]}
    write_json_atomic(base / "evolve" / "heat" / "native.json",
                      sign({"format": "kernforge-native-tune", "version": 1,
                            "noise_band": 0.02, "units": [evolved]}))
    done = export_units(base, None, min_speedup=1.0, band=0.02)
    assert done.native and done.entries == 1
    (entry,) = read_spec(done.spec).entries  # type: ignore[arg-type]
    assert entry["evidence"]["speedup"] == 1.5
    tuned = {**evolved, "best": {"block": [64, 1, 1], "jit": {}, "carveout": None},
             "best_label": "block=64x1x1", "speedup": 1.2, "ci": [1.1, 1.3], "notes": []}
    write_json_atomic(base / "tune" / "heat-0" / "result.json",
                      sign({"format": "kernforge-tune-result", "schema_version": 1,
                            "backend": "driver", "native": tuned}))
    said: list[str] = []
    done = export_units(base, None, min_speedup=1.0, band=0.02, notes=Notes(skipped=said.append))
    assert done.entries == 1 and read_spec(done.spec).entries[0]["evidence"]["speedup"] == 1.5  # type: ignore[arg-type]
    assert said == [(f"{base / 'tune' / 'heat-0' / 'result.json'}: block=64x1x1 is slower than "
                     f"block=128x1x1 for the same unit")]  # named by its result, as a recording's


def test_both_kinds_are_tuned_in_one_loop_in_the_order_found(
        on_fake: FakeCuda, on_disk: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Native units were tuned first and shown as a table of their own; every unit now takes
    one loop in the order found, with the same progress lines, one table and one headline."""
    from kernforge.cli.main import main

    run = tmp_path / "run"
    assert main(["tune", str(on_disk), "--out", str(run), "--preset", "full", "--trials", "2",
                 "--repeat", "2", "--in-process"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines()
             if line.startswith("[") and (" tuning " in line or " done: " in line)]
    assert [line.split("] ", 1)[-1].split(" (")[0].split(":")[0] for line in lines] == \
        ["1/2 tuning axpy-0", "1/2 axpy-0 done", "2/2 tuning heat-0", "2/2 heat-0 done"], lines
    table = out[out.index("tuning results in"):]
    assert "axpy-0" in table and "heat-0" in table and "native tuning" not in out
    assert "precision not recorded: " in table  # the native unit's headline line
    assert {p.parent.name for p in run.glob("*/result.json")} == {"axpy-0", "heat-0"}
