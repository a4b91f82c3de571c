"""M3a's GPU children end to end on the fake CUDA driver: operator matching's, fusion's and
lifting's ``session`` over the recorded 1D heat step, with candidates whose images are the fake
driver's kernels (``heat``: the original's twin; ``heat_xT``: T steps in one launch), so the
parallel compile's results, the checks from the recorded state, the screening, the fresh
checks fastest first, the interleaved timing and the files written all run as on a GPU."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kernforge.apps import fused as fz
from kernforge.apps import fused_gpu, operator_gpu, program_gpu
from kernforge.apps.adapter import Adapter
from kernforge.apps.probe import Recognized
from kernforge.apps.program_adapter import ProgramAdapter
from kernforge.core import CompileError, ConfigError
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda


@dataclass(frozen=True)
class _Op:
    key: str


@dataclass(frozen=True)
class _Heat1D(Recognized):
    """The fake's 1D heat step as recognized (the stencil specs hold 2D and 3D cells only)."""

    @property
    def cell(self) -> Any:
        return SimpleNamespace(id="heat 1D")


def _recognized(unit: Path) -> Recognized:
    rec = read_native(unit)
    n = int.from_bytes(rec.param_bytes[16:20], "little")
    c = float(np.frombuffer(rec.param_bytes[24:32], dtype=np.float64)[0])
    w = {(0, 0, 0): 1 - 2 * c, (0, 0, 1): c, (0, 0, -1): c}
    return _Heat1D(0, 1, "float64", (n, 1, 1), "star", 1, 1, w, "copy")


def _adapter(key: str, entry: str) -> Adapter:
    return Adapter(f"// {key}\n", entry, (4, 1, 1), (256, 1, 1), 0, -1, _Op(key))  # type: ignore[arg-type]


@pytest.fixture
def faked(fake: FakeCuda, heat_unit: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The heat unit recognized as its stencil, and every candidate's source compiled to the
    fake image (a source naming no kernel does not compile)."""
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(fake.libdir / "libcuda.so.1"))
    r = _recognized(heat_unit)
    for mod in (operator_gpu, fused_gpu):
        monkeypatch.setattr(mod, "recognized", lambda t: r)
    compiled: list[list[str]] = []

    def images(sources: list[str], arch: str) -> list[bytes | CompileError]:
        compiled.append(list(sources))
        return [CompileError("nvcc failed on the adapter: no kernel") if "broken" in s
                else fake.image() for s in sources]

    monkeypatch.setattr(operator_gpu, "compile_images", images)
    return {"compiled": compiled, "r": r}


def _phases_add_up(res: dict[str, Any], checked: int, screened: int) -> dict[str, Any]:
    """The child's phases (apps/phases.py): exclusive, so they add up to its time; every
    candidate counted, ``checked`` from the recorded state, ``screened`` timed, one final."""
    f = res["phases"]
    got = f["phases"]
    assert f["candidates"] == len(res["tried"])
    assert got["check"]["n"] == checked and got["screen"]["n"] == screened, got
    assert got["final"]["n"] == 1 and got["fresh"]["n"] >= 1, got
    assert {"setup", "baseline", "compile", "load", "state", "read"} <= set(got), got
    assert sum(v["s"] for v in got.values()) == pytest.approx(f["total_s"], abs=0.01)
    return got


def test_operator_session_keeps_the_fastest_candidate_that_passes(
        faked: dict[str, Any], heat_unit: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ops = {"twin": "heat", "three": "heat_x3", "broken": "heat", "nolayout": "heat"}

    def adapter(op: _Op, *_: Any) -> Adapter:
        if op.key == "nolayout":
            raise ConfigError("nolayout: the layout cannot be reproduced")
        return _adapter(op.key, ops[op.key])

    monkeypatch.setattr(operator_gpu, "candidates", lambda r: [_Op(k) for k in ops])
    monkeypatch.setattr(operator_gpu, "adapter", adapter)
    scales: list[float] = []  # the tolerance's scale, taken once for every candidate
    real_scale = operator_gpu.recorded_scale
    monkeypatch.setattr(operator_gpu, "recorded_scale",
                        lambda t, r: scales.append(real_scale(t, r)) or scales[-1])
    res = operator_gpu.session(str(heat_unit), str(tmp_path), 3, 3)
    assert len(scales) == 1
    assert faked["compiled"] == [["// twin\n", "// three\n", "// broken\n"]]  # one batch
    assert res.get("operator") == "twin", json.dumps(res, default=str)
    rows = {row["operator"]: row for row in res["tried"]}
    assert rows["three"]["refused"].startswith("recorded outputs differ")
    assert "nvcc failed" in rows["broken"]["refused"]
    assert "layout cannot be reproduced" in rows["nolayout"]["refused"]
    assert "median_s" in rows["twin"] and "refused" not in rows["twin"]
    assert res["checks"][0].startswith("recorded outputs match (region"), res["checks"]
    assert [c[:16] for c in res["checks"][1:]] == ["fresh input seed"] * 2, res["checks"]
    assert res["speedup"] > 0 and len(res["ratios"]) > 0
    assert Path(res["source"]).read_text() == "// twin\n"
    assert _phases_add_up(res, 2, 1)["compile"]["n"] == 3  # twin, three, broken


def test_fused_session_keeps_the_fastest_candidate_that_passes(
        faked: dict[str, Any], heat_unit: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    cands = [(3, _Op("fused3")), (5, _Op("fused5")), (3, _Op("wrong3")), (5, _Op("broken5"))]
    entries = {"fused3": "heat_x3", "fused5": "heat_x5", "wrong3": "heat_x5",
               "broken5": "heat_x5"}
    monkeypatch.setattr(fz, "candidates", lambda r, steps, **kw: cands)
    monkeypatch.setattr(fz, "fused_adapter",
                        lambda op, *a: _adapter(op.key, entries[op.key]))
    res = fused_gpu.session(str(heat_unit), str(tmp_path), 3, 3, [3, 5])
    assert res.get("operator") in ("fused3", "fused5"), json.dumps(res, default=str)
    rows = {row["operator"]: row for row in res["tried"]}
    assert "OUT differs from 3 original launches" in rows["wrong3"]["refused"]
    assert "nvcc failed" in rows["broken5"]["refused"]
    for k in ("fused3", "fused5"):
        assert "median_s" in rows[k] and "refused" not in rows[k], rows[k]
    assert res["steps"] == {"fused3": 3, "fused5": 5}[res["operator"]]
    assert res["fuse"]["steps"] == res["steps"]
    assert any(c.startswith("fresh input seed") for c in res["checks"]), res["checks"]
    assert Path(res["source"]).read_text() == f"// {res['operator']}\n"
    assert "reference" in _phases_add_up(res, 3, 2)  # the originals' T launches, timed


def test_program_session_keeps_the_fastest_candidate_that_passes(
        faked: dict[str, Any], heat_unit: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit lifted by probing (no source), its generated operators replaced by the fake's
    kernels after generation: the plain design's presets (the twin, then 3 steps)."""
    entries = iter(["heat", "heat_x3"])

    def adapter(k: Any, *_: Any) -> ProgramAdapter:
        return ProgramAdapter(f"// {k.key}\n", next(entries), (4, 1, 1), (256, 1, 1), 0, k)

    monkeypatch.setattr(program_gpu, "program_adapter", adapter)
    monkeypatch.setattr(program_gpu, "copy_bandwidth", lambda drv, arch, n: 1e12)
    res = program_gpu.session(str(heat_unit), str(tmp_path), 3, 3)
    assert res.get("how") == "lifted by probing", json.dumps(res, default=str)
    rows = [row for row in res["tried"] if row["operator"].startswith("plain")]
    assert len(rows) == 2 and "median_s" in rows[0], rows
    assert rows[1]["refused"].startswith("recorded outputs differ"), rows[1]
    assert res["operator"] == rows[0]["operator"] and res["design"] == "plain"
    assert faked["compiled"] == [[f"// {row['operator']}\n" for row in rows]]
    assert any(c.startswith("fresh input seed") for c in res["checks"]), res["checks"]
    assert res["speedup"] > 0 and res["copy_fraction"] is not None
    assert res["phases"]["phases"]["check"]["n"] == 2  # recorded and fresh, per candidate


def test_the_children_try_only_the_preferred_candidates(
        faked: dict[str, Any], heat_unit: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A later dataset's narrowing (apps/narrow.py) reaches the children in their request:
    only the preferred candidates are compiled, checked and screened; a list that names none
    of the child's candidates leaves them all."""
    ops = {"twin": "heat", "three": "heat_x3", "other": "heat"}
    monkeypatch.setattr(operator_gpu, "candidates", lambda r: [_Op(k) for k in ops])
    monkeypatch.setattr(operator_gpu, "adapter", lambda op, *_: _adapter(op.key, ops[op.key]))
    res = operator_gpu.session(str(heat_unit), str(tmp_path), 3, 3, ["other"])
    assert faked["compiled"][-1] == ["// other\n"] and res["operator"] == "other"
    assert [row["operator"] for row in res["tried"]] == ["other"]
    operator_gpu.session(str(heat_unit), str(tmp_path), 3, 3, ["gone"])
    assert faked["compiled"][-1] == ["// twin\n", "// three\n", "// other\n"]
    cands = [(3, _Op("fused3")), (5, _Op("fused5")), (3, _Op("wrong3"))]
    entries = {"fused3": "heat_x3", "fused5": "heat_x5", "wrong3": "heat_x5"}
    monkeypatch.setattr(fz, "candidates", lambda r, steps, **kw: cands)
    monkeypatch.setattr(fz, "fused_adapter",
                        lambda op, *a: _adapter(op.key, entries[op.key]))
    res = fused_gpu.session(str(heat_unit), str(tmp_path), 3, 3, [3, 5],
                            [[5, "fused5"], [3, "wrong3"]])
    assert [(row["steps"], row["operator"]) for row in res["tried"]] == [(5, "fused5"),
                                                                        (3, "wrong3")]
    assert res["operator"] == "fused5" and faked["compiled"][-1] == ["// fused5\n",
                                                                     "// wrong3\n"]
