"""Native units tuned from source (NVRTC capture, --source binding) and through the JIT (the PTX
of a fatbin), run for real against the fake driver, fake NVRTC and fake nvcc (no GPU)."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import pytest

from kernforge.backends import fatbin
from kernforge.backends.image_build import BindingError, bind_source, options_for
from kernforge.cli.main import main
from kernforge.core.native import NativeBuild
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated
from kernforge.replay.native_tune import bind, candidates
from kernforge.testing.fakedriver import FakeCuda


def _unit(cmd: list[str], out: Path, **kw: object) -> Path:
    status, units, problems, _ = record_command(cmd, out, max_instances=1, **kw)  # type: ignore[arg-type]
    assert status == 0 and not problems and units
    return units[0]


@pytest.mark.slow
def test_a_captured_source_is_rebuilt_under_the_cuda_knobs(on_fake_nvrtc: FakeCuda,
                                                           tmp_path: Path) -> None:
    unit = _unit(on_fake_nvrtc.nvrtc_command(), tmp_path / "r")
    rec = read_native(unit)
    labels = [v.label() for v in candidates(rec)]
    assert "nvrtc" in labels and "nvrtc(maxrregcount=64)" in labels
    assert not any("use_fast_math" in x for x in labels)  # results may change: tolerance only
    assert any("use_fast_math=True" in v.label() for v in candidates(rec, tolerant=True))
    src = rec.source
    assert src is not None
    base = NativeBuild(source=src)
    variants = [NativeVariant(), NativeVariant(build=base),
                NativeVariant(build=NativeBuild(source=src, knobs=(("maxrregcount", 64),))),
                NativeVariant(build=NativeBuild(source=src, knobs=(("use_fast_math", True),))),
                NativeVariant(build=NativeBuild(source=src, defines=(("KF_REPS", "1"),)))]
    out = run_isolated(unit, variants, repeat=2, warmup=1)
    assert [m.status.value for m in out["measurements"]] == \
        ["OK", "OK", "OK", "WRONG_RESULT", "OK"]
    opts = options_for(src, NativeBuild(source=src, knobs=(("maxrregcount", 64),)))
    assert opts == ("-arch=sm_90", "-DKF_FAKE=1", "--std=c++17", "--maxrregcount=64")


@pytest.mark.slow
def test_a_source_build_is_tuned_exported_and_deployed(
        on_fake_nvrtc: FakeCuda, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    rec_dir, run, spec = tmp_path / "r", tmp_path / "t", tmp_path / "spec.json"
    _unit(on_fake_nvrtc.nvrtc_command(), rec_dir)
    capfd.readouterr()
    assert main(["tune", str(rec_dir), "--out", str(run), "--repeat", "5",
                 "--try-define", "KF_REPS=1"]) == 0
    result = json.loads(next(run.glob("*/result.json")).read_text())["native"]
    assert result["win"] and "KF_REPS=1" in result["best_label"], result["best_label"]
    assert main(["export", str(run), "-o", str(spec)]) == 0
    image = next((tmp_path / "spec.images").iterdir()).read_bytes()
    assert image.startswith(b"KFFAKE ") and image != read_native(next(
        p for p in rec_dir.iterdir() if p.is_dir() and not p.name.startswith("."))).image_bytes()
    capfd.readouterr()
    assert main(["run", "--deploy", str(spec), "--", *on_fake_nvrtc.nvrtc_command()]) == 0
    got = capfd.readouterr()
    plain = subprocess.run(on_fake_nvrtc.nvrtc_command(), env=on_fake_nvrtc.env, capture_output=True,
                           text=True, check=True).stdout
    assert got.out == plain and "3 launch(es) ran a tuned configuration" in got.err


@pytest.mark.slow
def test_launches_with_a_changing_scalar_are_deployed_by_one_entry(
        on_fake_nvrtc: FakeCuda, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The program passes another `a` in every launch: the two recorded launches, tuned to the
    same winner, export as one entry that also replaces the third, unrecorded one."""
    rec_dir, run, spec = tmp_path / "r", tmp_path / "t", tmp_path / "spec.json"
    cmd = on_fake_nvrtc.nvrtc_command(3, 1000, "vary")
    status, units, problems, _ = record_command(cmd, rec_dir, max_instances=2)
    assert status == 0 and not problems and len(units) == 2
    capfd.readouterr()
    assert main(["tune", str(rec_dir), "--out", str(run), "--repeat", "5",
                 "--try-define", "KF_REPS=1"]) == 0
    results = [json.loads(p.read_text())["native"] for p in sorted(run.glob("*/result.json"))]
    assert [("KF_REPS=1" in r["best_label"], r["win"]) for r in results] == [(True, True)] * 2
    capfd.readouterr()
    assert main(["export", str(run), "-o", str(spec)]) == 0
    out = " ".join(capfd.readouterr().out.split())
    assert "one entry for 2 recorded launches" in out and "bytes 16-19 differ" in out, out
    (entry,) = json.loads(spec.read_text())["entries"]
    assert entry["key"][32:40] == "x" * 8 and entry["key"][40:] == (1000).to_bytes(4, "little").hex()
    assert main(["run", "--deploy", str(spec), "--", *cmd]) == 0
    got = capfd.readouterr()
    plain = subprocess.run(cmd, env=on_fake_nvrtc.env, capture_output=True, text=True,
                           check=True).stdout
    assert got.out == plain and "3 launch(es) ran a tuned configuration" in got.err


@pytest.mark.slow
def test_source_binding_checks_the_kernel_and_its_parameters(on_fake_nvrtc: FakeCuda,
                                                            tmp_path: Path) -> None:
    unit = _unit(on_fake_nvrtc.command(2, 1000), tmp_path / "r", kernels="heat")
    rec = read_native(unit)
    good = on_fake_nvrtc.libdir / "fake_kernels.c"
    assert bind(unit, rec, bind_source(good))
    labels = [v.label() for v in candidates(rec, source=bind_source(good))]
    assert "nvcc" in labels and "nvcc(maxrregcount=32)" in labels
    wrong = tmp_path / "wrong.c"  # heat with a different parameter layout
    wrong.write_text(good.read_text().replace('heat_params = "8,8,4,8"', 'heat_params = "8,8,8,8"'))
    with pytest.raises(BindingError, match=r"size@offset\) 8@0, 8@8, 8@16, 8@24"):
        bind(unit, rec, bind_source(wrong))
    other = tmp_path / "other.c"  # defines no heat at all
    other.write_text('const char *scale_params = "24";\nvoid scale(void) {}\n')
    assert not bind(unit, rec, bind_source(other))


# the CLI around test_source_binding_checks_the_kernel_and_its_parameters
@pytest.mark.slow
def test_cli_source_binding(on_fake_nvrtc: FakeCuda, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    rec_dir = tmp_path / "r"
    _unit(on_fake_nvrtc.command(2, 1000), rec_dir, kernels="heat")
    other = tmp_path / "other.c"
    other.write_text('const char *scale_params = "24";\nvoid scale(void) {}\n')
    assert main(["tune", str(rec_dir), "--out", str(tmp_path / "a"), "--source",
                 str(other)]) == 2
    assert "defines none of the recorded kernels" in capsys.readouterr().err
    good = on_fake_nvrtc.libdir / "fake_kernels.c"
    assert main(["tune", str(rec_dir), "--out", str(tmp_path / "b"), "--repeat", "2",
                 "--source", str(good), "-D", "KF_UNUSED=1"]) == 0
    evals = json.loads(next((tmp_path / "b").glob("*/result.json")).read_text())["native"][
        "evaluations"]
    built = [e for e in evals if e["label"].startswith("nvcc")
             and "launch_bounds" not in e["label"]]  # the fake's C has no __global__ to bound
    assert built and all(e["status"] == "OK" for e in built)


@pytest.mark.slow
def test_the_ptx_of_a_fatbin_is_jit_tuned(on_fake_nvrtc: FakeCuda, tmp_path: Path) -> None:
    unit = _unit([*on_fake_nvrtc.command(2, 1000), "fatbin"], tmp_path / "r", kernels="heat")
    rec = read_native(unit)
    assert rec.image_kind == "fatbin"
    jit = [v for v in candidates(rec) if v.build is not None and v.build.kind == "ptx"]
    assert [v.label() for v in jit[:3]] == ["ptx", "max_registers=32 ptx", "max_registers=64 ptx"]
    assert any(dict(v.jit).get("cache_mode") == 2 for v in jit)
    out = run_isolated(unit, [NativeVariant(), *jit], repeat=2, warmup=1)
    assert all(m.status.value == "OK" for m in out["measurements"])


def _entry(kind: int, arch: int, payload: bytes, flags: int = 0, full: int = 0) -> bytes:
    padded = (len(payload) + 7) // 8 * 8
    head = bytearray(64)
    struct.pack_into("<HHIIII", head, 0, kind, 0x101, 64, padded, 0, len(payload))
    struct.pack_into("<I", head, 28, arch)
    struct.pack_into("<QQQ", head, 40, flags, 0, full or len(payload))
    return bytes(head) + payload + b"\0" * (padded - len(payload))


def _fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", fatbin.MAGIC, 1, 16, len(body)) + body


def test_fatbin_ptx_is_found_uncompressed_and_lz4() -> None:
    line = b".version 8.0\n.target sm_90\n"  # 27 bytes
    ptx80, ptx90 = line.replace(b"90", b"80"), line * 3
    # an LZ4 block: 27 literals (15 + 12), then a match at offset 27 of 54 bytes (4 + 15 + 35)
    lz4 = bytes([0xFF, 12]) + line + struct.pack("<H", 27) + bytes([35, 0])
    assert fatbin.lz4_block(lz4, len(ptx90)) == ptx90
    with pytest.raises(ValueError):
        fatbin.lz4_block(lz4, len(ptx90) + 1)
    image = _fatbin(_entry(2, 90, b"\x7fELF..."), _entry(1, 80, ptx80),
                    _entry(1, 90, lz4, fatbin.FLAG_LZ4, len(ptx90)))
    assert [e.kind for e in fatbin.entries(image)] == [2, 1, 1]
    assert fatbin.ptx_for(image, (9, 0)) == ptx90 + b"\0"
    assert fatbin.ptx_for(image, (8, 6)) == ptx80 + b"\0"
    assert fatbin.ptx_for(_fatbin(_entry(2, 90, b"\x7fELF")), (9, 0)) is None


PROPOSER = """import sys
sys.stdin.read()
print("<<<<<<< SEARCH\\n#define KF_REPS 64 /* work a tuned build can drop: the same result, "
      "faster */\\n=======\\n#define KF_REPS 1\\n>>>>>>> REPLACE")
"""


@pytest.mark.slow
def test_evolve_a_captured_source_then_export_and_deploy(
        on_fake_nvrtc: FakeCuda, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import sys

    import yaml
    rec_dir, out, spec = tmp_path / "r", tmp_path / "evo", tmp_path / "spec.json"
    _unit(on_fake_nvrtc.nvrtc_command(), rec_dir)
    (tmp_path / "p.py").write_text(PROPOSER)
    cfg = {"evolve": {"seed": 1, "max_iterations": 2, "eval_slots": 1, "llm_slots": 1,
                      "max_in_flight": 1},
           "proposers": [{"kind": "command", "command": [sys.executable, str(tmp_path / "p.py")]}],
           "tuner": {"trials": 1, "repeat": 3}}
    (tmp_path / "evo.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["evolve", str(rec_dir), "--config", str(tmp_path / "evo.yaml"),
                 "--out", str(out)]) == 0
    assert "speedup" in capfd.readouterr().out
    (path,) = (out / "axpy_float").glob("*/result.json")  # the one format tuning writes
    doc = json.loads(path.read_text())
    assert doc["format"] == "kernforge-tune-result" and doc["sampler"] == "evolve"
    result = doc["native"]
    assert result["win"] and "evolved" in result["best_label"]
    assert not (out / "axpy_float" / "native.json").exists()
    assert main(["export", str(out), "-o", str(spec)]) == 0
    capfd.readouterr()
    assert main(["run", "--deploy", str(spec), "--", *on_fake_nvrtc.nvrtc_command()]) == 0
    assert "3 launch(es) ran a tuned configuration" in capfd.readouterr().err


@pytest.mark.slow  # 6 s
def test_resume_with_a_source_bound_since_names_the_unit_and_the_options(
        on_fake_nvrtc: FakeCuda, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--source adds builds to a native unit's space: a study resumed with it would mix
    incomparable trials, and the CLI says which unit and which options (not a study name)."""
    rec_dir, run = tmp_path / "r", tmp_path / "t"
    _unit(on_fake_nvrtc.command(2, 1000), rec_dir, kernels="heat")
    assert main(["tune", str(rec_dir), "--out", str(run), "--repeat", "2", "--trials", "1"]) == 0
    capsys.readouterr()
    assert main(["tune", str(rec_dir), "--out", str(run), "--repeat", "2", "--resume",
                 "--remeasure", "--source", str(on_fake_nvrtc.libdir / "fake_kernels.c")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "another search space" in err and "heat-0" in err
    assert "--source" in err and "another --out" in err and "study name" not in err
