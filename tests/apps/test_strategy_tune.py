"""M3b's evolution: every unit whose source is known is evolved, by the manifest's evolve
configuration when it names one, else by offline rewrites (issue 39 item 4)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kernforge.apps.manifest import Integrate
from kernforge.apps.strategies.tune import evolve_config, has_source, path_verdicts, refusals
from kernforge.pipeline.evolve_config import load_config
from kernforge.pipeline.run_app import record_command
from kernforge.testing.fakedriver import FakeCuda


def test_a_unit_with_source_is_evolved_offline_by_default(tmp_path: Path) -> None:
    cfg = evolve_config(Integrate(), tmp_path / "unit", {"kind": "source"}, tmp_path / "run")
    assert cfg is not None and cfg.parent == tmp_path / "run"
    run = load_config(cfg)  # the file evolve reads: offline proposers only, 24 iterations
    assert [p.kind for p in run.proposers] == ["offline"]
    assert run.evolve.max_iterations == 24
    assert evolve_config(replace(Integrate(), evolve_iterations=0), tmp_path / "unit",
                         {"kind": "source"}, tmp_path / "r2") is None
    mine = tmp_path / "mine.toml"
    assert evolve_config(replace(Integrate(), evolve_config=mine), tmp_path / "unit",
                         {"kind": "source"}, tmp_path / "r3") == mine


@pytest.mark.slow
def test_native_units_are_evolved_only_when_their_source_was_captured(
        on_fake_nvrtc: FakeCuda, fake: FakeCuda, tmp_path: Path) -> None:
    status, units, _, _ = record_command(on_fake_nvrtc.nvrtc_command(), tmp_path / "a",
                                         max_instances=1)
    assert status == 0 and has_source(units[0], "native")
    status, plain, _, _ = record_command(fake.command(), tmp_path / "b", max_instances=1)
    assert status == 0 and plain and not has_source(plain[0], "native")
    assert evolve_config(Integrate(), plain[0], {"kind": "native"}, tmp_path / "r") is None
    assert not has_source(tmp_path / "no-such-unit", "native")


def test_the_reason_says_per_unit_which_path_won_and_why_the_other_was_refused(
        tmp_path: Path) -> None:
    base = tmp_path / "m3b" / "0-n96-heat_step-0"
    err = (f"skipped {base}/evolve/heat_step/heat_step-0/result.json: inconclusive: the "
           "device was busy (68% busy) while it was measured\n"
           f"skipped {tmp_path}/m3b/0-n96-heat_step-0x/tune/r.json: another unit's\n"
           "nothing to export: ...\n")
    refused = refusals(err, base)
    assert refused == {"evolve": "inconclusive: the device was busy (68% busy) while it was "
                                 "measured"}
    won = {"kernel": "heat_step", "dataset": "n96", "tune_exit": 0, "ran": ["tune", "evolve"],
           "refused": refused, "exported": [{"kernel": "heat_step", "speedup": 1.78}]}
    assert path_verdicts(won) == ("heat_step (n96): 1.78x by tune (evolve refused: "
                                  "inconclusive: the device was busy (68% busy) while it was "
                                  "measured)")
    none = {"kernel": "heat_step", "dataset": "n64", "tune_exit": 0, "ran": ["tune", "evolve"],
            "refused": {"tune": "not faster", "evolve": "rejected: wrong results"},
            "reason": "no significant, verified win: ..."}
    assert path_verdicts(none) == ("heat_step (n64): nothing exported (tune refused: not "
                                   "faster; evolve refused: rejected: wrong results)")
    failed = {"kernel": "k", "dataset": "d", "tune_exit": 3,
              "reason": "kernforge tune exited with status 3: boom"}
    assert path_verdicts(failed) == "k (d): kernforge tune exited with status 3: boom"


def test_operator_matching_skips_kernels_recorded_in_process(tmp_path: Path) -> None:
    from kernforge.apps.harness import AppHarness
    from kernforge.apps.manifest import load_manifest
    from kernforge.apps.strategies import Context
    from kernforge.apps.strategies.operator import OperatorStrategy

    m = load_manifest(Path(__file__).parents[2] / "examples" / "apps" / "heat3d_cpu.toml")
    kernels = [{"name": "heat_step", "units": [str(tmp_path / "n96" / "heat_step-0")],
                "kind": "source", "share": 0.2}]
    o = OperatorStrategy().apply(Context(m, AppHarness(m, tmp_path), tmp_path, kernels, 1.0, {}))
    assert o.status == "SKIPPED" and "recorded in-process" in o.reason and "M3b" in o.reason
    assert o.figures["kernels"][0]["matched"] is False
