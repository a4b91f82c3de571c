"""A native unit is tuned by the study every unit is tuned by (issue 41, item 1): its space
comes from the unit (one change at a time from the recorded configuration: the candidates),
the exhaustive sampler is its default, any other sampler and the one budget apply, and the study
is kept in OUT/<unit>/ and resumed from there. Run on the fake driver."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernforge.cli.main import main
from kernforge.record.native_format import read_native
from kernforge.replay.native_tune import candidates, native_space
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture(scope="module")
def recorded(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    out = tmp_path_factory.mktemp("rec")
    status, _, problems, _ = record_fake(out, max_instances=1, kernels="*heat*")
    assert status == 0 and not problems
    return out


def test_the_space_of_a_native_unit_is_its_candidates(on_fake: FakeCuda,
                                                      recorded: Path) -> None:
    rec = read_native(recorded / "heat-0")
    ns = native_space(rec)
    points = list(ns.space.valid_points())
    got = [ns.variant(p, rec) for p in points]
    assert len(got) == len(candidates(rec)) and set(got) == set(candidates(rec))
    assert ns.variant(points[0], rec).is_recorded and points[0] == ns.space.baseline


def _evaluations(run: Path) -> list[str]:
    (unit,) = [json.loads(p.read_text())["native"] for p in run.glob("*/result.json")]
    return [e["label"] for e in unit["evaluations"]]


def test_the_study_is_kept_budgeted_and_resumed(on_fake: FakeCuda, recorded: Path,
                                                tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    run, every = tmp_path / "t", len(candidates(read_native(recorded / "heat-0")))
    assert main(["tune", str(recorded), "--out", str(run), "--repeat", "2",
                 "--trials", "3"]) == 0
    assert (run / "heat-0" / "study.db").is_file() and len(_evaluations(run)) == 3
    assert (run / "heat-0" / "history.png").is_file()  # as every unit's tuning draws it
    assert "1/1 heat-0 done: 3 evaluations," in capsys.readouterr().out
    assert main(["tune", str(recorded), "--out", str(run), "--repeat", "2"]) == 2
    assert "already holds a study" in capsys.readouterr().err
    assert main(["tune", str(recorded), "--out", str(run), "--repeat", "2", "--resume"]) == 0
    text = capsys.readouterr().out  # as a recording's: its result.json stands
    assert "heat-0: finished earlier (OK" in text and "not measured again" in text
    assert main(["tune", str(recorded), "--out", str(run), "--repeat", "2", "--resume",
                 "--remeasure"]) == 0
    labels = _evaluations(run)  # the three of the first run are read from the study
    assert len(labels) == every and labels[0] == "recorded" and len(set(labels)) == every
    assert f"new evaluations ({every} in the study" in capsys.readouterr().out
    assert (run / "heat-0" / "result.earlier-1.json").is_file()


@pytest.mark.slow  # 4 s; the exhaustive study: test_the_study_is_kept_budgeted_and_resumed
def test_another_sampler_searches_the_same_space(on_fake: FakeCuda, recorded: Path,
                                                 tmp_path: Path) -> None:
    run = tmp_path / "r"
    assert main(["tune", str(recorded), "--out", str(run), "--repeat", "2", "--sampler",
                 "random", "--trials", "4", "--seed", "1"]) == 0
    labels = _evaluations(run)
    rec = read_native(recorded / "heat-0")
    assert len(labels) == 4 and labels[0] == "recorded"
    assert set(labels) <= {v.label() for v in candidates(rec)}


def test_resume_reads_the_native_json_of_an_earlier_kernforge(on_fake: FakeCuda,
                                                              recorded: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    """A run directory tuned before every unit had its result.json holds one native.json of
    all its native units: ``--resume`` reports them finished, as that version did, instead of
    tuning them again."""
    from kernforge.core.jsonio import sign
    from kernforge.replay.native_tune import RESULT, RESULT_FORMAT

    new, old = tmp_path / "new", tmp_path / "old"
    assert main(["tune", str(recorded), "--out", str(new), "--repeat", "2", "--trials", "2"]) == 0
    (unit,) = [json.loads(p.read_text())["native"] for p in new.glob("*/result.json")]
    old.mkdir()
    (old / RESULT).write_text(json.dumps(sign({"format": RESULT_FORMAT, "version": 1,
                                               "noise_band": 0.02, "units": [unit]})))
    capsys.readouterr()
    assert main(["tune", str(recorded), "--out", str(old), "--repeat", "2", "--resume"]) == 0
    assert "finished earlier" in capsys.readouterr().out
    assert sorted(p.name for p in old.iterdir()) == [".kernforge.lock", RESULT]


@pytest.mark.slow  # 4 s
def test_a_sampled_search_ends_when_every_point_is_evaluated(on_fake: FakeCuda,
                                                             recorded: Path,
                                                             tmp_path: Path) -> None:
    """TPE's default budget (30) exceeds a native unit's few points: the study ends once
    each is evaluated instead of asking duplicates until it stalls."""
    run = tmp_path / "tpe"
    assert main(["tune", str(recorded), "--out", str(run), "--repeat", "2", "--sampler",
                 "tpe", "--seed", "1"]) == 0
    doc = json.loads(next(run.glob("*/result.json")).read_text())
    every = len(candidates(read_native(recorded / "heat-0")))
    assert doc["evaluations"] == every and doc["stop_reason"] == "trials"
