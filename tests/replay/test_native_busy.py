"""Native units are judged as recordings are (issue 43): the GPU's idle check before and after
the interleaved comparison, adaptive passes, the runs' spread and drift; a busy GPU makes the
verdict inconclusive with its reason, in validate, tune, evolve and export. The GPU is the fake
driver's; its utilisation is what an ``nvidia-smi`` on PATH prints (a script here, read by the
same probe that reads the real one)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kernforge.cli.main import main
from kernforge.harness.verdict import NOISE_BAND, Verdict, per_look
from kernforge.pipeline.native_evolve import _final
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.replay.native_share import share_winners
from kernforge.replay.native_tune import tune_native
from kernforge.replay.native_validate import validate_native
from kernforge.testing.fakedriver import FakeCuda

FASTER = "#define KF_REPS 1\n"  # the fake NVRTC kernel without the work a build can drop


@pytest.fixture
def gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file holding the GPU's utilisation in percent, which ``nvidia-smi`` prints."""
    bin_dir, util = tmp_path / "bin", tmp_path / "utilisation"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {util}\n")
    smi.chmod(0o755)
    util.write_text("3\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    return util


def _unit(fake: FakeCuda, out: Path) -> Path:
    status, units, problems, _ = record_command(fake.nvrtc_command(), out, max_instances=1)
    assert status == 0 and not problems and units
    return units[0]


def _candidate(unit: Path, tmp_path: Path) -> Path:
    src = read_native(unit).source
    assert src is not None
    path = tmp_path / "faster.cu"
    path.write_text(FASTER + src.code)
    return path


@pytest.mark.slow  # ~10 s
def test_a_busy_gpu_makes_a_native_validation_inconclusive(
        on_fake_nvrtc: FakeCuda, gpu: Path, tmp_path: Path) -> None:
    unit = _unit(on_fake_nvrtc, tmp_path / "r")
    faster = _candidate(unit, tmp_path)
    idle = validate_native(unit, source=faster)
    assert idle.verdict == "accepted" and idle.speed is not None and idle.speed.faster, \
        idle.message
    assert idle.idle is not None and idle.idle.idle is True
    # adaptive looks, as every comparison: 10, 17, 21 passes at 99% over the three
    assert idle.ab is not None and idle.ab.confidence == per_look(3) and idle.ab.passes >= 10
    gpu.write_text("90\n")
    busy = validate_native(unit, source=faster)
    assert busy.verdict == "inconclusive" and busy.reason == "idle:busy"
    assert busy.speed is not None and busy.speed.verdict is Verdict.INCONCLUSIVE
    assert "the GPU (nvidia-smi utilization.gpu" in busy.message
    assert "(90% busy)" in busy.message and "idle machine" in busy.message


@pytest.mark.slow  # ~15 s
def test_a_busy_gpu_keeps_no_tuned_or_evolved_winner_and_export_says_why(
        on_fake_nvrtc: FakeCuda, gpu: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    unit = _unit(on_fake_nvrtc, tmp_path / "r")
    rec = read_native(unit)
    gpu.write_text("90\n")
    t = tune_native(unit, rec, repeat=3, passes=5, defines=[[("KF_REPS", "1")]])
    assert t.best is not None and not t.win  # the fastest found, but not kept
    assert t.speed is not None and t.speed.verdict is Verdict.INCONCLUSIVE
    assert t.refused is not None and "GPU" in t.refused and "busy" in t.refused
    assert rec.source is not None
    evolved = _final(rec, rec.source, FASTER + rec.source.code, None, NOISE_BAND)
    assert not evolved.win and evolved.refused is not None and "busy" in evolved.refused
    # the command line: tune keeps no winner, export skips the unit with the verdict's reason
    run, spec = tmp_path / "t", tmp_path / "spec.json"
    main(["tune", str(tmp_path / "r"), "--out", str(run), "--repeat", "3",
          "--try-define", "KF_REPS=1"])
    doc = json.loads(next(run.glob("*/result.json")).read_text())["native"]
    assert doc["speed"]["verdict"] == "inconclusive" and not doc["win"]
    capsys.readouterr()
    assert main(["export", str(run), "-o", str(spec)]) != 0
    said = capsys.readouterr()
    assert "busy" in said.out + said.err and not spec.exists()


@pytest.mark.slow  # ~25 s
def test_a_winner_is_not_shared_on_a_busy_gpu(on_fake_nvrtc: FakeCuda, gpu: Path,
                                              tmp_path: Path) -> None:
    """Sharing compares the lead's winner on each other launch with the verdict and gate of
    tuning: tuned on an idle GPU, the winner is not shared while the GPU is busy."""
    _, units, _, _ = record_command(on_fake_nvrtc.nvrtc_command(3, 1000, "vary"),
                                    tmp_path / "r", max_instances=2)
    done = [tune_native(u, read_native(u), repeat=3, passes=5,
                        defines=[[("KF_REPS", "1")]]) for u in units]
    assert all(t.win for t in done), [t.refused for t in done]
    other = done[1]
    geo = next(i for i, (v, m) in enumerate(zip(other.variants, other.results))
               if i > 0 and v.block is not None and v.build is None and m.ok)
    other.best, other.ci = geo, (1.0, 1.01)
    gpu.write_text("90\n")
    assert share_winners(done, passes=5, repeat=3) == 0
    assert other.best == geo and not other.notes
