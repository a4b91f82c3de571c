"""M3a on a time loop whose step is several launches (apps/loop_sequence.py): a manifest-driven
run of fake_loop (steps "b": interior, then its companions edge, edge and mix) records the
hottest looping kernel's sequence in one more run and tries fusion of whole steps on it (the
fake's 1D stencil is refused, with the reason, in the row); the row's choice between the
paths; M4's merged spec carries a fused entry's companions to the interposer."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.apps import endtoend, loop_sequence
from kernforge.apps import fused as fz
from kernforge.apps.manifest import load_manifest
from kernforge.apps.operator_match import fused_spec
from kernforge.apps.store import AppStore
from kernforge.apps.strategies import Outcome
from kernforge.apps.strategies import operator as strat
from kernforge.apps.workflow import AppRun
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import fused_heat_result

STEPS = "b" * 16  # 16 steps: 2 left alone, 9 in the sequence, the loop goes on after it
COPIES = "bbc" * 6  # a copy to the host every 2 steps: the sequence ends after 2


def _loop_app(tmp_path: Path, fake: FakeCuda) -> Path:
    src = tmp_path / "loop-fake"
    src.mkdir()
    pkg = resources.files("kernforge.testing") / "fakecuda"
    for name in ("fake_loop.c", "fake_kernels.c"):
        (src / name).write_bytes((pkg / name).read_bytes())
    m = tmp_path / "app.toml"
    m.write_text(textwrap.dedent(f"""
        name = "loop-fake"
        source = "{src}"
        build = "sh -c 'cc -std=gnu11 -O1 -o fake_loop fake_loop.c -ldl && cc -O1 -fPIC -shared -o kernels.so fake_kernels.c'"
        env = {{ LD_LIBRARY_PATH = "{fake.libdir}" }}
        timeout_s = 120

        [[datasets]]
        name = "small"
        run = "./fake_loop {{source}}/kernels.so 1000 {STEPS}"

        [[datasets]]
        name = "copies"
        run = "./fake_loop {{source}}/kernels.so 1000 {COPIES}"

        [check]
        kind = "exit"

        [measure]
        rounds = 2
        e2e_rounds = 3
        min_share = 0.0

        [integrate]
        strategies = ["operator"]
        """))
    return m


@pytest.mark.slow
def test_the_loop_is_recorded_as_a_sequence_and_its_fusion_refused_with_the_reason(
        tmp_path: Path, fake: FakeCuda) -> None:
    said: list[str] = []
    out = tmp_path / "run"
    state = AppRun(load_manifest(_loop_app(tmp_path, fake)), out, progress=said.append).run()
    assert state.state == "RESEARCH", state
    store = AppStore.open(out)
    m3a = store.milestone("M3a")
    store.close()
    assert m3a is not None and m3a.status == "FAILED"
    rows = {r["kernel"]: r for r in m3a.figures["kernels"] if "/small/" in r["unit"]}
    assert set(rows) == {"interior", "edge", "mix"}
    (copies,) = [r for r in m3a.figures["kernels"]
                 if r["kernel"] == "interior" and "/copies/" in r["unit"]]
    seq = copies["sequence"]  # the same kernel on the other dataset: its own sequence
    assert (seq["steps"], seq["ended"]) == (2, "a driver call that could observe memory"), seq
    assert copies["refused"]["fused step"].startswith(
        "not tried: the program ran 2 launch(es) of the kernel before something observed "
        "memory"), copies["refused"]
    row = rows["interior"]  # the hottest kernel launched in a loop: its sequence recorded
    seq = row["sequence"]
    assert isinstance(seq, dict), seq
    assert (seq["steps"], seq["requested"], seq["ended"]) == (9, 9, "complete"), seq
    assert seq["other_kernels"] == ["edge", "mix"]
    assert seq["launches"] == 9 + 8 * 3  # each whole step: interior, edge, edge, mix
    rec = read_native(Path(seq["unit"]))  # the recording is the sequence, in M3a's folder
    assert rec.is_sequence and rec.entry == "interior"
    assert Path(seq["unit"]).is_relative_to(out / "m3a" / "small")
    refused = row["refused"]
    assert "1D stencil" in refused["fused step"], refused  # fusion's own recognizer's reason
    assert refused["fused"].startswith("not tried: the kernel's time loop was recorded")
    assert "1D stencil" in refused["one-launch"]
    assert not row["matched"] and "fused step: " in row["reason"]
    # the other looping kernels: no sequence of their own (one run per loop, not per kernel)
    for name in ("edge", "mix"):
        assert rows[name]["sequence"].startswith("not recorded: neither the hottest kernel "
                                                 "launched in a loop (interior)"), rows[name]
    assert sum("recording the time loop of" in s for s in said) == 2, said  # one a dataset


def test_the_loop_kernel_is_the_hottest_launched_often_enough() -> None:
    need = loop_sequence.needed_launches()
    assert need == 2 + min(fz.STEPS) + 1 and loop_sequence.sequence_length() == 9
    ks = [{"name": "init", "kind": "native", "units": ["u"], "seen": 1, "total_ms": 50.0},
          {"name": "edge", "kind": "native", "units": ["u"], "seen": 2 * need, "total_ms": 1.0},
          {"name": "step", "kind": "native", "units": ["u"], "seen": need, "total_ms": 9.0},
          {"name": "py", "kind": "source", "units": ["u"], "seen": need, "total_ms": 99.0}]
    assert loop_sequence.loop_kernels(ks) == {"step"}
    assert loop_sequence.why_not(ks[2], {"step"}, recognized=False) is None
    assert loop_sequence.why_not(ks[1], {"step"}, recognized=True) is None  # a stencil too
    assert "neither the hottest" in (loop_sequence.why_not(ks[1], {"step"}, False) or "")
    assert (loop_sequence.why_not(ks[0], {"step"}, True) or "").startswith(
        f"not recorded: 1 launch(es) in the recorded run; a time loop worth fusing has at "
        f"least {need} (2 left alone, then T + 1 for T = 3)")
    assert loop_sequence.loop_kernels(ks[:1]) == set()
    assert loop_sequence.glob_escape("k<float*>[2]?") == r"k<float\*>\[2]\?"
    assert loop_sequence.fusable_steps(9) == ((3, 5, 7), None)
    assert loop_sequence.fusable_steps(6)[0] == (3, 5)
    none, why = loop_sequence.fusable_steps(3)
    assert none == () and why is not None and "ran 3 launch(es)" in why


@dataclass
class _Found:  # FusedMatch's and OperatorMatch's interface
    spec_path: Path
    speedup: float
    ci: tuple[float, float] = (1.0, 2.0)
    cell: str = "c"
    note: str = "n"
    steps: int = 7
    gcells_s: float | None = None
    companions: tuple[dict[str, Any], ...] = ()


@dataclass
class _Not:
    reason: str
    recognized: str | None = None
    tried: tuple[dict[str, Any], ...] = ()


@dataclass
class _Matcher:
    fused: object
    calls: list[dict[str, Any]] = field(default_factory=list)

    def fuse_unit(self, unit: Path, **kw: Any) -> object:
        self.calls.append({"unit": unit, **kw})
        return self.fused


def _seq(unit: Path, steps: int, ended: str = "complete") -> dict[str, Any]:
    return {"unit": str(unit), "steps": steps, "requested": 9, "ended": ended,
            "launches": steps * 3, "other_kernels": ["bc", "norm"]}


def test_a_fused_step_with_companions_wins_and_says_what_became_of_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    comps = ({"name": "bc", "role": "folded"}, {"name": "bc", "role": "folded"},
             {"name": "norm", "role": "elided"})
    m = _Matcher(_Found(tmp_path / "step.json", 2.4, companions=comps))
    one = _Found(tmp_path / "one.json", 1.3)
    row = strat._paths(m, tmp_path / "unit", tmp_path, 3, one, _seq(tmp_path / "seq", 9))
    (call,) = m.calls  # fused on the sequence unit, never on the one-launch unit
    assert call["unit"] == tmp_path / "seq" and call["steps"] == (3, 5, 7)
    assert row["matched"] and row["spec"].endswith("step.json")
    assert row["path"] == "fused 7 whole steps with 3 companion(s): 2 folded, 1 elided"
    assert row["refused"]["one-launch"] == "slower (1.30x against 2.40x)"
    assert row["refused"]["fused"].startswith("not tried: the kernel's time loop was recorded")
    assert row["fused_step_figures"]["companions"] == list(comps)
    row = strat._paths(_Matcher(_Found(tmp_path / "s.json", 2.0)), tmp_path / "unit", tmp_path,
                       3, one, _seq(tmp_path / "seq", 9))
    assert row["path"] == ("fused 7 steps alone (the recorded step is this kernel's launch "
                           "only)")


def test_each_path_tried_is_shown_as_progress(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    told: list[str] = []
    strat._paths(_Matcher(_Found(tmp_path / "s.json", 2.0)), tmp_path / "unit", tmp_path, 3,
                 _Found(tmp_path / "one.json", 1.3), _seq(tmp_path / "seq", 9),
                 progress=told.append)
    assert told == [("fusing whole steps of the recorded time loop (9 steps held; each "
                    "candidate compiled, verified and timed in replay)")]
    told.clear()
    strat._paths(_Matcher(_Found(tmp_path / "s.json", 2.0)), tmp_path / "unit", tmp_path, 3,
                 _Found(tmp_path / "one.json", 1.3), "not recorded: too few launches",
                 progress=told.append)
    assert told == [("fusing several steps of the recognized stencil into one launch (each "
                    "candidate compiled, verified and timed in replay)")]


def test_a_loop_that_observes_memory_every_few_steps_is_not_fused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    m = _Matcher(_Found(tmp_path / "step.json", 2.4))
    one = _Found(tmp_path / "one.json", 1.3)
    seq = _seq(tmp_path / "seq", 3, ended="a driver call that could observe memory")
    row = strat._paths(m, tmp_path / "unit", tmp_path, 3, one, seq)
    assert m.calls == [] and row["path"] == "one-launch"
    why = row["refused"]["fused step"]
    assert why.startswith("not tried: the program ran 3 launch(es) of the kernel") and \
        why.endswith("(the sequence ended: a driver call that could observe memory)")
    assert row["sequence"] == seq


def test_without_a_sequence_the_kernel_is_fused_alone_and_the_row_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: True)
    m = _Matcher(_Found(tmp_path / "alone.json", 1.9, steps=5))
    why = "not recorded: 4 launch(es) in the recorded run; a time loop worth fusing has ..."
    row = strat._paths(m, tmp_path / "unit", tmp_path, 3, _Found(tmp_path / "one.json", 1.3),
                       why)
    (call,) = m.calls
    assert call["unit"] == tmp_path / "unit" and "steps" not in call
    assert row["path"] == "fused 5 steps alone" and row["refused"]["fused step"] == why


def test_m4_deploys_a_fused_step_with_its_companions_through_the_interposer(
        heat_unit: Path, tmp_path: Path) -> None:
    """M4's integration merges M3a's specs into one: the fused entry keeps its deferral and
    its companions on the interposer's line, as the end-to-end runs load it."""
    rec = read_native(heat_unit)
    bc = {"name": "apply_boundary", "params": (b"\0" * 8 + b"\x10\0\0\0").hex(),
          "in_slots": [], "out_slots": [0], "role": "folded", "does": "z=0 := 1"}
    res = fused_heat_result(rec, tmp_path, [bc])
    spec = fused_spec(rec, res, tmp_path / "m3a")
    src = tmp_path / "src"
    src.mkdir()
    setup, info = endtoend.integrate([Outcome("DONE", "x", native_specs=(str(spec),))],
                                     tmp_path, src)
    assert info["entries"] == 1 and "KERNFORGE_DEPLOY" in setup.env
    assert strat.interposer_fuses(Path(info["spec"]))
    (line,) = [ln for ln in (tmp_path / "m4" / "deploy.interposer.tsv").read_text()
               .splitlines() if "kf_fused_1" in ln]
    assert "fuse:3:" in line and "apply_boundary" in line
    assert np.isfinite(res["speedup"])
