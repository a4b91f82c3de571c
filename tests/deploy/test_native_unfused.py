"""A fused entry's one-launch replacement (deploy/native_unfused.py): how the spec holds it,
what the interposer's line file holds for it, how specs are combined (deploy/merge.py) and
where M3a does it (apps/strategies/operator.py); and the written spec run for real in the
interposer on the fake CUDA driver."""

from __future__ import annotations

import json
import struct
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernforge.apps.strategies import operator as strat
from kernforge.core import ConfigError
from kernforge.core.native import NativeParam, NativeRecording, NativeRegion
from kernforge.deploy import merge
from kernforge.deploy import native as nd
from kernforge.deploy import native_unfused as nu
from kernforge.testing.fakedriver import FakeCuda


def _rec(tmp: Path, loaded: bytes = b"KFFAKE image\0", grid: int = 8) -> NativeRecording:
    """fake_loop's heat(in, out, n=1000, c=0.25): IN at byte 0, OUT at 8."""
    raw = bytes(16) + (1000).to_bytes(4, "little") + bytes(4) + struct.pack("<d", 0.25)
    blob = "img-" + nd.image_id(loaded)  # content-addressed, as in a real unit (ids cached)
    return NativeRecording(tmp / "unit", "heat", "heat", blob, "text", (grid, 1, 1),
                           (128, 1, 1), 0,
                           (NativeParam(0, 8, ((0, 0),)), NativeParam(8, 8, ((8, 1),)),
                            NativeParam(16, 4), NativeParam(24, 8)), raw,
                           (NativeRegion(0x7000, 8000, "alloc", "a", None),
                            NativeRegion(0x9000, 8000, "alloc", "b", None)),
                           identity={"device": "fake"},
                           loader=lambda blob: np.frombuffer(loaded, dtype=np.uint8))


def _fused(rec: NativeRecording, image: bytes = b"fused") -> dict[str, Any]:
    return nd.fused_entry(rec, image="fused.img", image_bytes=image, entry_name="heat_x5",
                          grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0, steps=5, in_offset=0,
                          out_offset=8, evidence={"speedup": 3.0})


def _one(rec: NativeRecording, image: bytes = b"one") -> dict[str, Any]:
    return nd.replacement_entry(rec, image="one.img", image_bytes=image, entry_name="heat_one",
                                grid=(8, 1, 1), block=(128, 1, 1), shared_mem=0, carveout=None,
                                evidence={"speedup": 2.0})


def _specs(tmp: Path, rec: NativeRecording, fused_image: bytes = b"fused",
           one_image: bytes = b"one", one_rec: NativeRecording | None = None
           ) -> tuple[Path, Path]:
    f = nd.write_spec(tmp / "fused.json", [_fused(rec, fused_image)],
                      {"fused.img": fused_image})
    o = nd.write_spec(tmp / "one.json", [_one(one_rec or rec, one_image)], {"one.img": one_image})
    return f, o


def test_the_fused_line_names_the_one_launch_line_after_it(tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    e = nu.with_one_launch(_fused(rec), _one(rec))
    spec = nd.read_spec(nd.write_spec(tmp_path / "s.json", [e], {"fused.img": b"fused",
                                                                 "one.img": b"one"}))
    _, fused, one = nd.interposer_lines(spec).splitlines()
    f, o = fused.split("\t"), one.split("\t")
    assert f[13] == "fuse:5:0:8" and f[-1] == "unfused:next" and f[6] == "heat_x5"
    assert len(o) == 13 and o[0] == "heat" and o[6] == "heat_one" and o[5].endswith("one.img")
    assert o[:5] == f[:5] and o[12] == f[12]  # the same launch: name, geometry, key, source


def test_without_one_launch_the_lines_are_as_before(tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    spec = nd.read_spec(nd.write_spec(tmp_path / "s.json", [_fused(rec)],
                                      {"fused.img": b"fused"}))
    (line,) = nd.interposer_lines(spec).splitlines()[1:]
    assert "unfused" not in line and len(line.split("\t")) == 14


def test_a_one_launch_for_another_launch_or_not_one_launch_is_refused(tmp_path: Path) -> None:
    rec, other = _rec(tmp_path), _rec(tmp_path, grid=4)
    assert "grid differ" in (nu.one_launch_problem(_one(other), _fused(rec)) or "")
    assert "itself fused" in (nu.one_launch_problem(_fused(rec), _fused(rec)) or "")
    assert "not an ordinary entry" in (nu.one_launch_problem({"kernel": "heat"}, _fused(rec))
                                       or "")
    with pytest.raises(ValueError, match="grid differ"):
        nu.with_one_launch(_fused(rec), _one(other))
    bad = _fused(rec)
    bad["fuse"]["one_launch"] = {**_one(rec), "kernel": "cool"}
    with pytest.raises(nd.FusedEntryError, match="kernel differ"):
        nd.check_fuse(bad, "here")


def test_an_altered_one_launch_image_is_refused(tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    path = nd.write_spec(tmp_path / "s.json", [nu.with_one_launch(_fused(rec), _one(rec))],
                         {"fused.img": b"fused", "one.img": b"one"})
    (tmp_path / "s.images" / "one.img").write_bytes(b"two")
    with pytest.raises(ConfigError, match="image of heat .* is missing or altered"):
        nd.read_spec(path)


def test_merge_one_launch_pairs_the_same_launch(tmp_path: Path) -> None:
    rec = _rec(tmp_path)
    fused, one = _specs(tmp_path, rec)
    out, note = merge.merge_one_launch(fused, one)
    assert out.name == "fused-one-launch.json" and "one-launch operator" in note
    (e,) = nd.read_spec(out).entries
    assert e["fuse"]["one_launch"]["entry"] == "heat_one" and e["evidence"]["speedup"] == 3.0
    assert len(list((tmp_path / "fused-one-launch.images").iterdir())) == 2
    # merging it with other specs keeps the replacement and its image
    m = merge.merge_native_specs([out], tmp_path / "m.json")
    (e,) = nd.read_spec(m.path).entries
    assert e["fuse"]["one_launch"]["image"] != e["image"]
    assert "unfused:next" in nd.interposer_lines(nd.read_spec(m.path))


def test_merge_one_launch_keeps_the_fused_spec_when_nothing_pairs(tmp_path: Path) -> None:
    fused, one = _specs(tmp_path, _rec(tmp_path), one_rec=_rec(tmp_path, grid=4))
    assert merge.merge_one_launch(fused, one) == (fused, (
        "the original kernel (the one-launch spec replaces another launch: its kernel, "
        "source_image, grid, block, shared_mem differ)"))
    out, note = merge.merge_one_launch(fused, tmp_path / "missing.json")
    assert out == fused and note.startswith("the original kernel (no one-launch replacement")


@dataclass
class _Found:  # FusedMatch's and OperatorMatch's interface
    spec_path: Path
    speedup: float
    ci: tuple[float, float] = (1.0, 2.0)
    cell: str = "c"
    note: str = "n"
    steps: int = 5
    gcells_s: float | None = None


class _Matcher:
    def __init__(self, fused: object) -> None:
        self.fused = fused

    def fuse_unit(self, unit: Path, **kw: Any) -> object:
        return self.fused


def test_m3a_s_fused_winner_gets_the_one_launch_operator(tmp_path: Path) -> None:
    fused, one = _specs(tmp_path, _rec(tmp_path))
    row = strat._paths(_Matcher(_Found(fused, 3.0)), tmp_path, tmp_path, 3, _Found(one, 2.0))
    assert row["path"] == "fused 5 steps alone" and row["spec"].endswith("-one-launch.json")
    assert "one-launch operator" in row["unfused_steps"]
    (e,) = nd.read_spec(Path(row["spec"])).entries
    assert e["fuse"]["one_launch"]["entry"] == "heat_one"
    row = strat._paths(_Matcher(_Found(fused, 1.5)), tmp_path, tmp_path, 3, _Found(one, 2.0))
    assert row["path"] == "one-launch" and "unfused_steps" not in row  # the one-launch won


def test_a_spec_written_by_kernforge_runs_the_remainder_as_the_one_launch_operator(
        fake: FakeCuda, interposer_lib: Path, tmp_path: Path) -> None:
    """deploy/native.py's combined spec through interposer_lines on fake_loop: 13 heat steps,
    two fused launches, the three held at the copy run heat_one."""
    rec = _rec(tmp_path, f"KFFAKE {fake.kernels}".encode() + b"\0")
    image = f"KFFAKE {fake.tuned}\n".encode()
    out, _ = merge.merge_one_launch(*_specs(tmp_path, rec, image, image))
    cmd = fake.loop_command("s" * 13 + "c")
    alone = subprocess.run(cmd, env=fake.env, capture_output=True, text=True, check=True)
    lines, log, trace = tmp_path / "deploy.tsv", tmp_path / "log.json", tmp_path / "trace"
    lines.write_text(nd.interposer_lines(nd.read_spec(out)))
    env = {**fake.env, "LD_PRELOAD": str(interposer_lib), "KERNFORGE_DEPLOY": str(lines),
           "KERNFORGE_DEPLOY_LOG": str(log), "FAKE_CUDA_TRACE": str(trace)}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout == alone.stdout, done.stderr
    assert "kernforge:" not in done.stderr, done.stderr
    assert Counter(trace.read_text().split()) == Counter({"heat_x5": 2, "heat_one": 3})
    counts = json.loads(log.read_text())
    assert counts["flushed_one_launch"] == 3 and counts["fused_groups"] == 2, counts


def _keyed(e: dict[str, Any], n: int) -> dict[str, Any]:
    """``e`` for heat's launches with ``n`` points (the key's bytes 16..19)."""
    key = e["key"]
    return {**e, "key": key[:32] + n.to_bytes(4, "little").hex() + key[40:]}


def test_a_one_launch_for_another_problem_is_not_paired(tmp_path: Path) -> None:
    """Of two one-launch entries of the same kernel and geometry, the one whose key matches
    the fused entry's launches is paired, wherever it comes; one for another problem size
    (no held launch would ever run it) is refused in a spec."""
    rec = _rec(tmp_path)
    fused, right, other = _fused(rec), _one(rec), _keyed(_one(rec), 999)
    (e,), n = nu.paired([fused], [other, right])
    assert n == 1 and e["fuse"]["one_launch"]["key"] == fused["key"]
    assert nu.paired([fused], [other]) == ([fused], 0)
    assert "key differ" in (nu.one_launch_problem(other, fused) or "")
    # a key that compares fewer bytes (a generalized one) covers the fused entry's launches
    broad = {**right, "key": "xx" * 32}
    assert nu.one_launch_problem(broad, fused) is None and nu.key_covers(broad["key"],
                                                                          fused["key"])
    partial = {**right, "key": "00" + right["key"][2:]}  # pins a byte of the IN pointer
    assert nu.one_launch_problem(partial, fused) is None
    assert not nu.key_covers(partial["key"], fused["key"])
    (e,), _ = nu.paired([fused], [partial, broad])
    assert e["fuse"]["one_launch"]["key"] == broad["key"]  # the broader one before a partial
    assert nu.paired([fused], [{**right, "key": ""}])[1] == 1  # any launch


def test_the_run_report_gives_the_fused_counts_and_names_the_one_launch_line(
        on_fake: FakeCuda, seed_cache: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str]) -> None:
    """``kernforge run --deploy`` of the combined spec: two lines of heat in the counts, the
    fused one with its fused and held launches, the other said to be its one-launch line."""
    from kernforge.cli.main import main

    monkeypatch.setenv("KERNFORGE_CACHE_DIR", str(seed_cache(tmp_path / "cache")))
    rec = _rec(tmp_path, f"KFFAKE {on_fake.kernels}".encode() + b"\0")
    image = f"KFFAKE {on_fake.tuned}\n".encode()
    out, _ = merge.merge_one_launch(*_specs(tmp_path, rec, image, image))
    assert main(["run", "--deploy", str(out), "--", *on_fake.loop_command("s" * 13 + "c")]) == 0
    err = capfd.readouterr().err
    assert ("  heat: 0 replaced; fused 5 steps: 2 fused launch(es), 3 held launch(es) run "
            "unfused (3 by its one-launch line)\n") in err, err
    assert ("  heat: 3 replaced (the one-launch line of the fused entry above; its held "
            "launches included)\n") in err, err
