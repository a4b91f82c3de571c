"""The demo's deployment step (pipeline/demo.py, demo_deploy.py): winners that do not save more
per launch than a replaced launch costs the host are not deployed, the measured overhead and the
reasons land in the result and in summary.json, and with nothing deployed the application is not
run again. Real recordings of C kernels, the real overhead measurement on the CPU backend."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends import Kernel
from kernforge.deploy import read_spec
from kernforge.harness import ABResult
from kernforge.pipeline.demo import APPS, DemoResult, _worth_deploying, _write_summary
from kernforge.pipeline.demo_deploy import Winner, deploy_overhead, export_spec, worth
from kernforge.record import load_recording, record

SRC = ("void {name}(double *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1.0; }}")


def _winner(tmp: Path, name: str, baseline_s: float, tuned_s: float) -> Winner:
    """A recorded C kernel ``name`` and an A/B result of ``baseline_s`` -> ``tuned_s``."""
    k = Kernel(SRC.format(name=name), name, backend="cpu")
    with record(tmp / name) as rec:
        k(np.zeros(4), 4)
    r = load_recording(rec.paths[0])
    ab = ABResult(ratios=(baseline_s / tuned_s,) * 3, samples_a=((baseline_s,) * 3,) * 3,
                  samples_b=((tuned_s,) * 3,) * 3, first=("a", "b", "a"),
                  ci_low=baseline_s / tuned_s, ci_high=baseline_s / tuned_s)
    return Winner("tune", r, r.variant.with_(options={"opt_level": "O3"}), ab)


def test_winners_saving_no_more_than_the_overhead_are_not_deployed(tmp_path: Path) -> None:
    big = _winner(tmp_path, "big", 2e-3, 1e-3)  # saves 1 ms per launch
    small = _winner(tmp_path, "small", 10.5e-6, 10e-6)  # saves 0.5 us
    kept, dropped = worth([small, big], 2e-6)
    assert kept == [big]
    assert [d.winner for d in dropped] == [small]
    assert dropped[0].reason == ("small: saves 0.50 us per launch (10.50 us -> 10.00 us in "
                                 "replay), not more than the 2.00 us a replaced launch costs "
                                 "the host: not deployed")
    assert worth([small, big], -1e-6)[0] == [small, big]  # a negative overhead counts as none
    edge = _winner(tmp_path, "edge", 0.75, 0.5)  # saves exactly the overhead: no gain
    assert worth([edge], 0.25)[0] == [] and worth([edge], 0.2499)[0] == [edge]
    spec = read_spec(export_spec(kept, tmp_path / "deploy.json"))
    assert [e.kernel.entry for e in spec.entries] == ["big"]
    assert spec.entries[0].evidence.baseline_s == 2e-3


def test_the_demo_measures_the_overhead_and_records_what_it_left_out(tmp_path: Path) -> None:
    big = _winner(tmp_path, "big", 1.0, 0.5)  # saves half a second per launch
    none = _winner(tmp_path, "none", 1e-3, 1e-3)  # saves nothing: never worth it
    result = DemoResult(tmp_path, APPS["cpu"], 0, winners=[big, none])
    said: list[str] = []
    deployed = _worth_deploying(result, said.append)
    assert deployed == [big] and said and "replaced launch" in said[0]
    table = result.overhead
    assert table is not None and table.backend == "cpu" and result.overhead_error == ""
    assert result.overhead_s == table.per_launch_s and abs(table.per_launch_s) < 1e-3
    assert [n.winner for n in result.not_deployed] == [none]
    # no saving and a 1.000x interval: the speed verdict ("not faster") says why first
    assert result.not_deployed[0].reason.startswith("none: not faster: 1.000x")
    assert result.end_to_end_status == "nothing deployed"  # no end-to-end run was made
    _write_summary(tmp_path / "summary.json", result)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["overhead_s"] == table.per_launch_s
    assert summary["overhead"]["backend"] == "cpu" and summary["overhead_error"] is None
    assert summary["not_deployed"] == [{
        "kernel": "none", "from": "tune", "speedup": 1.0, "baseline_s": 1e-3, "tuned_s": 1e-3,
        "reason": result.not_deployed[0].reason}]
    assert summary["end_to_end"] is None
    assert summary["end_to_end_status"] == "nothing deployed"


def test_no_winner_means_no_measurement(tmp_path: Path) -> None:
    result = DemoResult(tmp_path, APPS["cpu"], 0)
    assert _worth_deploying(result, lambda s: None) == []
    assert result.overhead is None and result.end_to_end_status == "no verified speedup above 1"


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
def test_an_overhead_that_cannot_be_measured_says_why() -> None:
    table, why = deploy_overhead("cuda")
    assert table is None and "needs CuPy and an NVIDIA GPU" in why


def test_a_winner_the_application_never_launches_is_left_out(tmp_path: Path) -> None:
    """confirm_each runs the real CPU example with each winner's spec alone."""
    from kernforge.pipeline.demo import EXAMPLES
    from kernforge.pipeline.demo_deploy import confirm_each

    stranger = _winner(tmp_path, "stranger", 2e-3, 1e-3)  # a kernel heat3d_cpu never runs
    command = ["python", str(EXAMPLES / "heat3d_cpu.py"), "--n", "12", "--steps", "2"]
    checked, dropped = confirm_each(command, [stranger], tmp_path / "run", rounds=2)
    assert len(checked) == 1 and not checked[0].kept and len(checked[0].e2e.ratios) == 2
    assert checked[0].e2e.identical and checked[0].e2e.substituted == 0
    assert [d.winner for d in dropped] == [stranger]
    assert dropped[0].reason == "stranger: no launch replaced: not deployed"
    assert (tmp_path / "run" / "confirm" / "stranger.json").is_file()
