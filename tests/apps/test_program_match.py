"""Lifted-program operators' host side on the fake CUDA driver: lift_unit's child lifts the
recorded unit by probing and reports why no operator was accepted (the fake driver runs no
generated image); a lifted result's signed spec entry; M3a's choice between the paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kernforge.apps.lift_includes import kernel_name
from kernforge.apps.operator_match import NoMatch, _deploy, lift_unit
from kernforge.apps.strategies import operator as strat
from kernforge.deploy import native as nd
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda


def test_lift_unit_lifts_by_probing_in_its_child(fake: FakeCuda, heat_unit: Path,
                                                 tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(fake.libdir / "libcuda.so.1"))
    m = lift_unit(heat_unit, out_dir=tmp_path / "l", repeat=2, passes=1)
    assert isinstance(m, NoMatch), m
    assert m.recognized and m.recognized.startswith("lifted by probing: 1D fp64"), m
    assert "no operator passed" in m.reason and m.tried, m
    assert {row["operator"].split("(")[0] for row in m.tried} >= {"plain", "tiled"}
    assert all(row.get("refused") for row in m.tried)
    assert isinstance(lift_unit(tmp_path, out_dir=tmp_path / "l"), NoMatch)  # not a unit


def test_a_lifted_result_is_a_signed_spec_entry(heat_unit: Path, tmp_path: Path) -> None:
    rec = read_native(heat_unit)
    (tmp_path / "l.cubin").write_bytes(b"\x7fELF a lifted image")
    res = {"speedup": 1.6, "ci": [1.5, 1.7], "image": str(tmp_path / "l.cubin"),
           "median_original_s": 5e-4, "median_adapter_s": 3e-4, "ratios": [1.6],
           "recognized": "lifted by probing: 1D fp64 program", "cell": "program 0123",
           "operator": "plain(bx=256,by=1,bz=1)", "checks": ["ok"], "arch": "sm_90",
           "entry": "kf_lifted_0123", "grid": [4, 1, 1], "block": [256, 1, 1],
           "shared_mem": 0, "carveout": None, "design": "plain", "how": "lifted by probing",
           "copy_fraction": 0.71, "bytes": 16000, "copy_bw": 3e12}
    m = _deploy(rec, res, tmp_path / "out", 0.02, (), "lifted-operator", "lifted", "lifted")
    assert not isinstance(m, NoMatch) and m.figures and m.figures["copy_fraction"] == 0.71
    spec = nd.read_spec(m.spec_path)
    (e,) = spec.entries
    assert e["entry"] == "kf_lifted_0123" and e["evidence"]["method"] == "lifted-operator"
    assert e["evidence"]["design"] == "plain" and e["key"] == nd.problem_key(rec)
    res["speedup"], res["ci"] = 1.01, [0.95, 1.08]
    m = _deploy(rec, res, tmp_path / "out", 0.02, (), "lifted-operator", "lifted", "lifted")
    assert isinstance(m, NoMatch) and "not deployed" in m.reason


def test_kernel_names() -> None:
    assert kernel_name("jacobi_step") == "jacobi_step"
    assert kernel_name("void ns::stencil3d<double>(double const*, double*)") == "stencil3d"


@dataclass
class _Found:
    spec_path: Path
    speedup: float
    ci: tuple[float, float] = (1.0, 2.0)
    cell: str = "c"
    note: str = "n"
    figures: dict[str, Any] | None = None


@dataclass
class _Not:
    reason: str
    recognized: str | None = None
    tried: tuple[dict[str, Any], ...] = ()


class _Matcher:
    def __init__(self, lifted: object) -> None:
        self.lifted, self.calls = lifted, 0

    def fuse_unit(self, unit: Path, *, out_dir: Path, repeat: int) -> object:
        return _Not("fused: no")

    def lift_unit(self, unit: Path, *, out_dir: Path, repeat: int,
                  search_trials: int = 0) -> object:
        self.calls += 1
        self.search_trials = search_trials
        return self.lifted


def test_m3a_lifts_a_kernel_the_recognizer_refuses(tmp_path: Path) -> None:
    found = _Found(tmp_path / "l.json", 1.7, figures={"design": "tiled", "copy_fraction": 0.8})
    m = _Matcher(found)
    row = strat._paths(m, tmp_path, tmp_path, 3, _Not("the kernel wrote 2 buffers"))
    assert m.calls == 1 and row["matched"] and row["path"] == "lifted program (tiled)"
    assert m.search_trials == 0  # no search budget given
    strat._paths(m, tmp_path, tmp_path, 3, _Not("the kernel wrote 2 buffers"), search=12)
    assert m.search_trials == 12  # the manifest's budget reaches lift_unit
    assert row["lifted_figures"]["copy_fraction"] == 0.8
    assert "wrote 2 buffers" in row["refused"]["one-launch"]
    assert "no stencil recognized" in row["refused"]["fused"]


def test_m3a_says_why_lifting_was_refused_or_not_tried(tmp_path: Path) -> None:
    m = _Matcher(_Not("not lifted: probing: a non-polynomial output"))
    row = strat._paths(m, tmp_path, tmp_path, 3, _Not("the response is not linear"))
    assert not row["matched"] and "lifted: not lifted: probing" in row["reason"]
    m = _Matcher(_Found(tmp_path / "l.json", 3.0))
    row = strat._paths(m, tmp_path, tmp_path, 3, _Found(tmp_path / "o.json", 1.4))
    assert m.calls == 0 and row["path"] == "one-launch"
    assert "recognized stencil takes the matrix" in row["refused"]["lifted"]


@pytest.mark.slow  # the benchmark script in a child; lift_unit above is the quick one
def test_the_benchmark_prints_a_row_per_unit(fake: FakeCuda, heat_unit: Path,
                                              tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    env = {"KERNFORGE_LIBCUDA": str(fake.libdir / "libcuda.so.1"),
           "PYTHONPATH": str(root / "src"), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    p = subprocess.run([sys.executable, str(root / "benchmarks" / "lifted_operators.py"),
                        f"{heat_unit.parent}:heat", "--out", str(tmp_path / "o"), "--repeat",
                        "2", "--passes", "1", "--json", str(tmp_path / "l.json")],
                       capture_output=True, text=True, env=env, timeout=600, check=False)
    assert p.returncode == 0, p.stderr
    assert "| heat-0 | - | refused: lifted by probing: 1D fp64" in p.stdout, p.stdout
    (row,) = json.loads((tmp_path / "l.json").read_text())
    assert row["unit"] == "heat-0" and row["tried"]
