"""M3a to M4 on the fake CUDA driver with a fused winner: fake_loop's time loop (steps "b":
interior, then its companions edge, edge and mix) recorded as a sequence, "fused" by a stand-in
of fuse_unit into a real signed spec of the fake kernels' ``interior_c5`` (the fake driver runs
no generated operator), beside a one-launch spec of ``interior``. M4 deploys the fused winner
through the real interposer, runs the one-launch arm in the same rounds, each run checked by
the program's own check (a hash of its final buffers), and says how many launches the
interposer fused; ``[integrate] compare_one_launch = false`` turns the arm off."""

from __future__ import annotations

import struct
import sys
import textwrap
import types
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from kernforge.apps.manifest import load_manifest
from kernforge.apps.store import AppStore
from kernforge.apps.workflow import AppRun
from kernforge.deploy import native as nd
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

N, STEPS = 1000, "b" * 16
V0, V1, W = 0.125, -0.25, 0.375  # fake_loop.c's companions' scalars
# the program's own check: the last observation's hash (of every buffer), as a number
HASH = "import sys\nprint('hash', int(sys.stdin.read().split()[-1][-12:], 16))\n"


def _app(tmp_path: Path, fake: FakeCuda, arm: bool) -> Path:
    src = tmp_path / "loop-fake"
    src.mkdir()
    pkg = resources.files("kernforge.testing") / "fakecuda"
    for name in ("fake_loop.c", "fake_kernels.c"):
        (src / name).write_bytes((pkg / name).read_bytes())
    (src / "hash.py").write_text(HASH)
    m = tmp_path / "app.toml"
    m.write_text(textwrap.dedent(f"""
        name = "loop-fake"
        source = "{src}"
        build = "sh -c 'cc -std=gnu11 -O1 -o fake_loop fake_loop.c -ldl && cc -O1 -fPIC -shared -o kernels.so fake_kernels.c'"
        env = {{ LD_LIBRARY_PATH = "{fake.libdir}" }}
        timeout_s = 120

        [[datasets]]
        name = "small"
        run = "sh -c './fake_loop {{source}}/kernels.so {N} {STEPS} | {{python}} hash.py'"

        [check]
        kind = "regex"
        pattern = 'hash ([0-9]+)'

        [measure]
        rounds = 1
        e2e_rounds = 2
        min_share = 0.0
        floor = 0.1

        [integrate]
        strategies = ["operator"]
        compare_one_launch = {str(arm).lower()}
        """))
    return m


@dataclass
class _Found:  # OperatorMatch's and FusedMatch's interface
    spec_path: Path
    speedup: float
    steps: int = 5
    ci: tuple[float, float] = (1.0, 3.0)
    cell: str = "fake"
    note: str = "stand-in"
    gcells_s: float | None = None
    companions: tuple[dict[str, Any], ...] = ()


@dataclass
class _No:
    reason: str
    recognized: str | None = None
    tried: list[Any] = field(default_factory=list)


def _companions() -> list[nd.Companion]:
    """fake_loop.c's companions of interior: edge(out, n, side, v) twice, then mix(in, out,
    n, w); their pointer words (OUT at byte 0; IN at 0 and OUT at 8) are the step's."""
    def edge(side: int, v: float) -> bytes:
        return bytes(8) + struct.pack("<iid", N, side, v)
    return [nd.Companion("edge", edge(0, V0), (), (0,)), nd.Companion("edge", edge(1, V1), (), (0,)),
            nd.Companion("mix", bytes(16) + struct.pack("<i4xd", N, W), (0,), (8,))]


@pytest.fixture
def matcher(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> None:
    """Operator matching as its interface promises: interior matches one launch at 1.3x (the
    tuned image of the same kernel) and fuses 5 whole steps of its recorded loop at 2x (the
    fake kernels' interior_c5: the same arithmetic, bit for bit); the companions match
    nothing."""
    def match_unit(unit_dir: Path, *, out_dir: Path, repeat: int = 10) -> object:
        rec = read_native(unit_dir)
        if rec.entry != "interior":
            return _No("not a stencil")
        image = fake.image(tuned=True)
        e = nd.entry(rec, {"block": list(rec.block), "carveout": 0}, "tuned.bin", image,
                     {"speedup": 1.3, "ci": [1.2, 1.4]})
        return _Found(nd.write_spec(out_dir / "one.json", [e], {"tuned.bin": image}), 1.3,
                      steps=1)

    def fuse_unit(unit: Path, *, out_dir: Path, steps: tuple[int, ...] = (), **_: Any) -> object:
        assert 5 in steps and read_native(unit).is_sequence
        image = fake.image()
        e = nd.fused_entry(read_native(unit), image="fused.bin", image_bytes=image,
                           entry_name="interior_c5", grid=(1, 1, 1), block=(1, 1, 1),
                           shared_mem=0, steps=5, in_offset=0, out_offset=8,
                           evidence={"speedup": 2.0}, companions=_companions())
        spec = nd.write_spec(out_dir / "fused.json", [e], {"fused.bin": image})
        return _Found(spec, 2.0, companions=tuple({"name": c.name, "role": "folded"}
                                                  for c in _companions()))

    mod = types.ModuleType("kernforge.apps.operator_match")
    mod.match_unit = match_unit  # type: ignore[attr-defined]
    mod.fuse_unit = fuse_unit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kernforge.apps.operator_match", mod)


def _m4(tmp_path: Path, fake: FakeCuda, arm: bool) -> tuple[str, dict[str, Any], list[str]]:
    said: list[str] = []
    out = tmp_path / "run"
    AppRun(load_manifest(_app(tmp_path, fake, arm)), out, progress=said.append).run()
    store = AppStore.open(out)
    m3a, m4 = store.milestone("M3a"), store.milestone("M4")
    store.close()
    assert m3a is not None and m3a.status == "DONE", m3a
    (row,) = [r for r in m3a.figures["kernels"] if r["matched"]]
    assert row["path"].startswith("fused 5 whole steps with 3 companion(s)"), row
    assert set(row["alternatives"]) == {"one-launch", "fused step"}
    assert m4 is not None and "datasets" in m4.figures, m4
    return m4.reason, m4.figures, said


@pytest.mark.slow
def test_m4_runs_the_one_launch_arm_beside_the_fused_winner(
        tmp_path: Path, fake: FakeCuda, matcher: None) -> None:
    reason, figures, said = _m4(tmp_path, fake, arm=True)
    (small,) = figures["datasets"]
    assert "failed" not in figures, figures.get("failed")  # every arm passed its check
    assert figures["integration"]["fused"] == ["interior"]
    # 16 steps: a group runs when 6 are held, the last step's 4 launches flushed at the end
    # (the interior of that step runs the one-launch operator: M3a paired it with the fused step)
    assert (small["fused"], small["fused_groups"], small["flushed_unfused"],
            small["flushed_one_launch"]) == (True, 3, 4, 1), small
    assert "small " in reason and ("(3 fused launches, 4 held launches run unfused (1 as the "
                                   "one-launch operator))") in reason, reason
    arm = figures["one_launch"]
    (swap,) = arm["swapped"]
    assert swap["path"] == "fused step" and swap["kernel"] == "interior"
    assert arm["integration"]["fused"] == [] and arm["integration"]["entries"] == 1
    assert small["one_launch"]["replaced"] == 16  # every interior launch, one at a time
    assert len(small["one_launch"]["ratios"]) == len(small["ratios"]) == 8
    assert "verdict" in arm["against_one_launch"]
    assert "the one-launch arm (each fused kernel's one-launch spec in its place) against " \
           "the original: small " in reason
    assert "the fused integration against the one-launch arm: small " in reason
    assert sum("(one-launch)" in s for s in said) == 8  # one run of the arm a round


@pytest.mark.slow
def test_the_switch_turns_the_arm_off(tmp_path: Path, fake: FakeCuda, matcher: None) -> None:
    reason, figures, said = _m4(tmp_path, fake, arm=False)
    (small,) = figures["datasets"]
    assert "one_launch" not in small and small["fused_groups"] == 3
    assert figures["one_launch"] == {"skipped": "[integrate] compare_one_launch = false"}
    assert "no one-launch arm: [integrate] compare_one_launch = false" in reason
    assert not any("(one-launch)" in s for s in said)
