"""Fusion's host side on the fake CUDA driver: fuse_unit's child refuses a recorded unit with
the probe's reason; the reference (the original launched T times, swapped); a fused result's
spec entry (signed, ``fuse`` beside the replacement); M3a's choice between the one-launch
operator and the fused one."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.apps import fused as fz
from kernforge.apps.adapter import layout
from kernforge.apps.fused_gpu import Steps
from kernforge.apps.operator_gpu import ReplayTarget
from kernforge.apps.operator_match import NoMatch, fuse_unit, fused_spec
from kernforge.apps.probe import Recognized
from kernforge.apps.strategies import operator as strat
from kernforge.backends.driver import Driver
from kernforge.core import ConfigError
from kernforge.deploy import native as nd
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeReplay
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import fused_heat_result


def test_fuse_unit_reports_the_reason_from_its_child_process(
        fake: FakeCuda, heat_unit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(fake.libdir / "libcuda.so.1"))
    m = fuse_unit(heat_unit, out_dir=tmp_path / "f", steps=(3,))
    assert isinstance(m, NoMatch) and "1D stencil" in m.reason, m
    assert isinstance(fuse_unit(tmp_path, out_dir=tmp_path / "f"), NoMatch)  # not a unit
    with pytest.raises(ConfigError, match="odd number"):
        fuse_unit(heat_unit, out_dir=tmp_path / "f", steps=(4,))


def test_a_fused_result_is_a_signed_spec_entry_with_fuse(heat_unit: Path, tmp_path: Path
                                                        ) -> None:
    rec = read_native(heat_unit)
    slots = layout(rec)
    ptrs = [i for i, s in enumerate(slots) if s.pointer]
    assert len(ptrs) == 2
    w = {(0, 0, 0): 0.5, (0, 0, 1): 0.25, (0, 0, -1): 0.25}
    r = Recognized(ptrs[0], ptrs[1], "float64", (1000, 1, 1), "star", 1, 1, w, "copy")
    (tmp_path / "f.cubin").write_bytes(b"\x7fELF a fused image")
    res = {"steps": 5, "speedup": 1.8, "ci": [1.7, 1.9], "image": str(tmp_path / "f.cubin"),
           "median_original_s": 5e-4, "median_fused_s": 2.8e-4, "ratios": [1.8, 1.8],
           "recognized": r.describe(), "cell": "star_1~x/1000x1x1/fp64",
           "operator": "overlap[steps=5]", "checks": ["ok"], "arch": "sm_90",
           "entry": "kf_fused_0123", "grid": [16, 1, 1], "block": [64, 1, 1],
           "shared_mem": 0, "carveout": None, "fuse": fz.fuse_field(slots, r, 5)}
    spec = nd.read_spec(fused_spec(rec, res, tmp_path / "out"))  # signature and image hash
    (e,) = spec.entries
    assert e["fuse"] == {"steps": 5, "in_offset": slots[ptrs[0]].offset,
                         "out_offset": slots[ptrs[1]].offset}
    assert e["entry"] == "kf_fused_0123" and e["new_grid"] == [16, 1, 1]
    assert e["kernel"] == rec.entry and e["key"] == nd.problem_key(rec)
    assert e["evidence"]["method"] == "fused-operator" and e["evidence"]["steps"] == 5
    assert spec.image_path(e).read_bytes() == b"\x7fELF a fused image"
    assert "kf_fused_0123" in nd.interposer_lines(spec)
    assert strat.interposer_fuses(spec.path)  # the line carries the deferral


def test_a_fused_result_with_companions_carries_them_to_the_interposer(
        heat_unit: Path, tmp_path: Path) -> None:
    rec = read_native(heat_unit)
    bc = {"name": "apply_boundary", "params": (b"\0" * 8 + b"\x10\0\0\0").hex(),
          "in_slots": [], "out_slots": [0]}
    res = fused_heat_result(rec, tmp_path, [bc, bc])
    spec = nd.read_spec(fused_spec(rec, res, tmp_path / "out"))
    (e,) = spec.entries
    assert e["fuse"]["companions"] == [bc, bc]
    (line,) = [ln for ln in nd.interposer_lines(spec).splitlines() if "kf_fused_1" in ln]
    assert "fuse:3:" in line and line.count("apply_boundary") == 2
    assert strat.interposer_fuses(spec.path)


@dataclass
class _Found:  # FusedMatch's and OperatorMatch's interface
    spec_path: Path
    speedup: float
    ci: tuple[float, float] = (1.0, 2.0)
    cell: str = "c"
    note: str = "n"
    steps: int = 5
    gcells_s: float | None = None


@dataclass
class _Not:
    reason: str
    recognized: str | None = None
    tried: tuple[dict[str, Any], ...] = ()


class _Matcher:
    def __init__(self, fused: object) -> None:
        self.fused, self.calls = fused, 0

    def fuse_unit(self, unit: Path, *, out_dir: Path, repeat: int) -> object:
        self.calls += 1
        return self.fused


@pytest.mark.parametrize("fuses", [True, False])
def test_m3a_keeps_the_faster_deployable_path(tmp_path: Path, fuses: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(strat, "interposer_fuses", lambda spec: fuses)
    one, fused = _Found(tmp_path / "one.json", 1.3), _Found(tmp_path / "fused.json", 2.1)
    row = strat._paths(_Matcher(fused), tmp_path, tmp_path, 3, one)
    assert row["matched"] and row["fused_figures"]["steps"] == 5
    if fuses:
        assert row["path"] == "fused 5 steps alone" and row["spec"].endswith("fused.json")
        assert "slower (1.30x against 2.10x)" in row["refused"]["one-launch"]
    else:
        assert row["path"] == "one-launch" and row["spec"].endswith("one.json")
        assert "carries no fusion" in row["refused"]["fused"]


def test_m3a_reasons_when_neither_path_deploys(tmp_path: Path) -> None:
    m = _Matcher(_Not("fused 3 steps by overlap[...], not deployed: inconclusive"))
    row = strat._paths(m, tmp_path, tmp_path, 3, _Not("matched by naive, not deployed: x",
                                                      recognized="2D star"))
    assert not row["matched"] and m.calls == 1
    assert "one-launch: matched by naive" in row["reason"] and "fused: fused 3" in row["reason"]
    m = _Matcher(None)
    row = strat._paths(m, tmp_path, tmp_path, 3, _Not("the kernel wrote 2 buffers"))
    assert m.calls == 0 and "fused: not tried: no stencil recognized" in row["reason"]


def test_the_reference_is_the_original_launched_t_times_swapped(fake: FakeCuda,
                                                                heat_unit: Path) -> None:
    """fused_gpu's reference on the fake driver: the recorded kernel (a 1D heat step) launched
    3 times with its two pointers swapped, against numpy; and timed between one pair of
    events."""
    rec = read_native(heat_unit)
    rp = NativeReplay(rec, Driver(library=str(fake.libdir / "libcuda.so.1")))
    t = ReplayTarget(rp)
    slots = layout(rec)
    n = int.from_bytes(rec.param_bytes[16:20], "little")
    c = float(np.frombuffer(rec.param_bytes[24:32], dtype=np.float64)[0])
    r = Recognized(0, 1, "float64", (n, 1, 1), "star", 1, 1, {(0, 0, 0): 1.0}, "copy")
    seq = Steps(rp, fz.fuse_field(slots, r, 3))
    rp.restore()
    before = t.read()
    seq.run()
    after = t.read()
    a = before[0].view(np.float64)[:n].copy()
    b = before[1].view(np.float64)[:n].copy()
    for _ in range(3):
        b[1:-1] = a[1:-1] + c * (a[:-2] - 2 * a[1:-1] + a[2:])
        b[0], b[-1] = a[0], a[-1]
        a, b = b, a
    np.testing.assert_array_equal(after[1].view(np.float64)[:n], a)  # T odd: OUT holds it
    np.testing.assert_array_equal(after[0].view(np.float64)[:n], b)
    assert seq.time() >= 0.0
