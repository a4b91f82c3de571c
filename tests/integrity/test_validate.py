"""Full validation on the CPU backend: verdicts, prior best, downgrade, idle, ledger, figure,
the CLI, and the tuner's winner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kernforge
from kernforge.cli.main import main
from kernforge.core import Recording, Status
from kernforge.harness.ledger import BaselineStore, Ledger
from kernforge.harness.provenance import IdleCheck, read_figure
from kernforge.record import find_recordings, load_recording
from kernforge.replay import validate as validate_mod
from kernforge.replay.checks import Integrity
from kernforge.replay.validate import validate

SAXPY = r"""
void saxpy(double *y, const double *x, double a, long n) {
    for (long i = 0; i < n; i++) y[i] = a * x[i] + y[i];
}
"""
LOOSE = 0.5  # CI machines are shared: a self-comparison is only asserted to be near 1
# three runs a side per pass: a pass's median ignores one run stalled by another process


@pytest.fixture(scope="module")
def rec(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    root = tmp_path_factory.mktemp("validate-rec")
    k = kernforge.Kernel(SAXPY, "saxpy", backend="cpu")
    rng = np.random.default_rng(3)
    with kernforge.record(root):
        k(rng.random(1 << 14), rng.random(1 << 14), 2.0, 1 << 14, threads=1)
    return load_recording(find_recordings(root)[0])


def _quick(**kw) -> dict:
    return {"passes": 7, "per_pass": 3, "warmup": 1, "band": LOOSE,
            "integrity": Integrity(seed=5), **kw}


def _conclusive(v) -> None:
    """A measurement the shared machine made inconclusive has nothing else to show."""
    if v.verdict == "inconclusive":
        pytest.skip(f"the machine was busy: {v.message}")


def test_the_recorded_kernel_is_accepted_with_provenance(rec, tmp_path: Path) -> None:
    v = validate(rec, ledger=tmp_path / "l.jsonl", figure=tmp_path / "f.json",
                 baseline=tmp_path / "best.json", command=["kernforge", "x"], **_quick())
    _conclusive(v)
    assert v.accepted and v.status is Status.OK and v.reason == "" and v.ab is not None
    assert v.speed is not None and not v.speed.faster  # the same kernel is never faster
    assert 0.5 < v.speedup < 2.0 and v.roofline is not None and v.idle is not None
    assert {"static", "verify", "poison", "fresh"} <= set(v.notes)
    fig = read_figure(tmp_path / "f.json")
    assert fig["figure"]["verdict"] in ("accepted", "downgraded")
    assert len(fig["raw"]["samples_b"]) >= 7 and fig["provenance"]["command"] == ["kernforge", "x"]
    assert fig["figure"]["speed"]["verdict"] in ("not faster", "inconclusive")
    assert fig["provenance"]["compiler"] and fig["provenance"]["date"]
    (entry,) = Ledger(tmp_path / "l.jsonl").entries()
    assert entry["case"] == rec.name and entry["verdict"] == v.verdict


def test_prior_best_regression_and_claimed_downgrade(rec, tmp_path: Path) -> None:
    store = BaselineStore(tmp_path / "best.json")
    device = kernforge.get_backend("cpu").identity()["device"]
    store.check(rec.name, str(device), 50.0)  # a prior best no self-comparison reaches
    v = validate(rec, baseline=store, **_quick())
    _conclusive(v)
    assert v.verdict == "rejected" and v.status is Status.OK
    assert v.reason == "regression:prior-best" and "prior best 50" in v.message
    d = validate(rec, claimed=10.0, **_quick())
    _conclusive(d)
    assert d.verdict == "downgraded" and d.accepted and d.reason == "remeasure:lower"


def test_busy_device_is_never_accepted_nor_rejected(rec, monkeypatch, tmp_path) -> None:
    """Issue 43: validate accepted (exit 0) with idle false where export refuses the same
    evidence. A busy device makes the verdict inconclusive, with or without --require-idle,
    and the prior best (however high) rejects nothing."""
    busy = IdleCheck(False, 0.9, "test")
    monkeypatch.setattr(validate_mod, "idle_check", lambda be: busy)
    v = validate(rec, require_idle=True, **_quick())
    assert v.verdict == "inconclusive" and v.reason == "idle:busy" and not v.accepted
    assert "busy (90% busy)" in v.message and v.ab is None
    store = BaselineStore(tmp_path / "best.json")
    store.check(rec.name, str(kernforge.get_backend("cpu").identity()["device"]), 50.0)
    w = validate(rec, baseline=store, **_quick())
    assert w.verdict == "inconclusive" and not w.accepted
    # the busiest of the check before (0.9 here) and the real one during the measurement: on
    # a loaded machine the latter may be busier still
    assert w.idle is not None and w.idle.idle is False and (w.idle.utilisation or 0) >= 0.9
    assert w.speed is not None and w.speed.verdict.value == "inconclusive"
    assert w.regression is None


def test_cheats_are_rejected_and_kept_in_the_ledger(rec, tmp_path: Path) -> None:
    cheat = SAXPY.replace("a * x[i] + y[i]", "0.0")
    v = validate(rec, rec.variant.with_(source=rec.source.with_code(cheat)),
                 ledger=tmp_path / "l.jsonl", **_quick())
    assert (v.verdict, v.status, v.reason) == ("rejected", Status.WRONG_RESULT,
                                               "verify:recorded")
    timer = "#include <time.h>\n" + SAXPY.replace("{\n", "{\n    (void)clock();\n", 1)
    t = validate(rec, rec.variant.with_(source=rec.source.with_code(timer)),
                 ledger=tmp_path / "l.jsonl", **_quick())
    assert (t.status, t.reason) == (Status.INVALID_CONFIG, "static:timer")
    assert "line 4" in t.message
    assert [e["reason"] for e in Ledger(tmp_path / "l.jsonl").entries()] == \
        ["verify:recorded", "static:timer"]


@pytest.mark.slow
def test_cli_validate_lint_ledger_and_regen(rec, tmp_path: Path, capsys) -> None:
    cheat = tmp_path / "cheat.c"
    cheat.write_text(SAXPY.replace("for (long i = 0; i < n; i++)", "for (long i = 0; i < n / 2; i++)"))
    fig, led = tmp_path / "fig.json", tmp_path / "led.jsonl"
    code = main(["integrity", "validate", str(rec.path), "--source", str(cheat), "--seed", "1",
                 "--ledger", str(led), "--figure", str(fig), "--passes", "2"])
    assert code == 5 and "verify:recorded" in capsys.readouterr().out
    assert read_figure(fig)["provenance"]["command"][:3] == ["kernforge", "integrity", "validate"]
    assert main(["integrity", "lint", str(cheat)]) == 0
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k(float *y) { y[0] = __expf(y[0]); }')
    assert main(["integrity", "lint", str(bad)]) == 5
    assert "static:fastmath" in capsys.readouterr().out
    assert main(["integrity", "ledger", str(led)]) == 0
    assert "verify:recorded" in capsys.readouterr().out
    assert "--seed" in json.loads(fig.read_text())["provenance"]["command"]
    assert main(["integrity", "regen", str(fig)]) == 0
    assert "before: rejected" in capsys.readouterr().out


def test_fast_math_in_a_define_value_or_unparsable_options_is_refused(rec) -> None:
    pragma = '_Pragma("GCC optimize(\\"fast-math\\")")'
    v = validate(rec, rec.variant.with_(defines={"FAST": pragma}), **_quick())
    assert (v.status, v.reason) == (Status.INVALID_CONFIG, "static:fastmath"), v.message
    assert "#define FAST" in v.message
