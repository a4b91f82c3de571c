"""The demo's fusion stage on the fake CUDA driver (pipeline/demo_fuse.py): the fused arm runs
the program with the real interposer deferring whole steps (fake_loop.c's step "b": interior
and its companions) in a warm child process, measured against the plain program by the demo's
interleaved harness; the program's output is the plain one's, launches were fused, and the
decision follows; the stage records the fake loop's sequence and reports why fuse_unit refused
it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from deploy_run import step_line, tuned_image

from kernforge.core import KernforgeError
from kernforge.pipeline.demo_fuse import decide, fusion_stage, measure_fused, output_check
from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda

# the program: the fake loop run by a Python application (the demo's arms run Python
# applications in-process), which prints a checksum line of everything the loop observed
WRAPPER = """
import hashlib, os, subprocess, sys
if os.environ.get("DEMO_FAIL"):
    sys.exit("failed as asked")
out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout
print(f"fake_loop steps={sys.argv[-1].count('b')} "
      f"checksum={hashlib.sha256(out.encode()).hexdigest()[:16]}")
"""
STEPS = "b" * 13 + "c" + "b" * 10  # 13 steps, a copy, 10 steps: fused groups and leftovers


@pytest.fixture
def program(on_fake: FakeCuda, tmp_path: Path) -> list[str]:
    (tmp_path / "wrapper.py").write_text(WRAPPER)
    return ["python", str(tmp_path / "wrapper.py"), *on_fake.loop_command(STEPS)]


@pytest.mark.slow
def test_the_fused_arm_defers_in_a_warm_process(on_fake: FakeCuda, program: list[str],
                                                tmp_path: Path) -> None:
    lines = tmp_path / "deploy.tsv"
    lines.write_text(step_line(tuned_image(on_fake, tmp_path), 5) + "\n")
    log = tmp_path / "deploy-log.json"
    lib = interposer.build(tmp_path / "lib")
    env = interposer.preload_env(lib, {"KERNFORGE_DEPLOY": str(lines),
                                       "KERNFORGE_DEPLOY_LOG": str(log)})
    said: list[str] = []
    vs_plain, vs_one, counts, runs = measure_fused(program, tmp_path / "fused.json", env, log,
                                                   rounds=2, progress=said.append)
    assert said == ["end to end, fused: round 1/2", "end to end, fused: round 2/2"]
    assert vs_one is None and runs == 3 and len(vs_plain.ratios) == 2
    # every run's output is the plain program's, bit for bit, with whole steps fused
    assert vs_plain.identical and output_check(vs_plain.plain_output,
                                               vs_plain.deployed_output)[0]
    # the last run's counts: a group runs when T+1 steps are held (the last stays held): 13
    # steps give 2 groups and 3 steps flushed by the copy, 10 give 1 and 5 flushed at the end
    assert (counts["fused_groups"], counts["flushed_unfused"]) == (3, (3 + 5) * 4), counts
    ok, why = decide(vs_plain, vs_one, counts["fused_groups"])  # 2 rounds: no verdict
    assert not ok and why.startswith("end to end against the plain program, inconclusive")


@pytest.mark.slow
def test_a_program_that_fails_fused_is_an_error_and_leaves_no_process(
        on_fake: FakeCuda, program: list[str], tmp_path: Path) -> None:
    lines = tmp_path / "deploy.tsv"
    lines.write_text(step_line(tuned_image(on_fake, tmp_path), 5) + "\n")
    env = interposer.preload_env(interposer.build(tmp_path / "lib"),
                                 {"KERNFORGE_DEPLOY": str(lines), "DEMO_FAIL": "1"})
    before = set(_python_children())  # an earlier test's worker pool may still be up
    with pytest.raises(KernforgeError) as info:
        measure_fused(program, tmp_path / "fused.json", env, tmp_path / "log.json", rounds=1)
    assert info.value.message.startswith("the application exited with 1 (with the fused "
                                         "spec): ")
    assert "SystemExit" not in info.value.message and "failed as asked" in info.value.message
    # every arm's process ended with the comparison
    assert not set(_python_children()) - before


def _python_children() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()
            and _parent(int(p)) == os.getpid() and _is_python(int(p))]


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _is_python(pid: int) -> bool:
    try:
        return Path(sys.executable).name in Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return False


def test_the_stage_records_the_loop_and_says_why_it_was_not_fused(
        on_fake: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(on_fake.libdir / "libcuda.so.1"))
    said: list[str] = []
    f = fusion_stage(lambda seq: on_fake.loop_command("b" * (seq + 4)), ["unused"],
                     tmp_path / "fusion", kernel="interior", steps=(3,), progress=said.append)
    assert f.unit is not None and f.unit.parent == tmp_path / "fusion" / "recording"
    assert not f.deployed and f.match is None and f.vs_plain is None
    assert f.reason.startswith("not fused: ") and "1D stencil" in f.reason, f.reason
    assert said[0] == "recording the time loop natively (5 steps of interior)"
    assert said[1].startswith("fusing 3 steps of ")


def test_the_stage_measures_a_signed_fused_spec_of_the_recorded_loop(
        on_fake: FakeCuda, program: list[str], tmp_path: Path) -> None:
    """Recorded, then "fused" into a real signed spec of fake_loop's interior_c5 (fuse_unit's
    stand-in: the fake driver runs no generated operator), deployed through the interposer by
    the stage's own environment, measured, and decided."""
    from types import SimpleNamespace

    from deploy_run import companion_fields

    from kernforge.deploy import native as nd
    from kernforge.record.native_format import read_native

    def fuse(unit: Path, *, out_dir: Path, steps: tuple[int, ...], **_: object) -> object:
        rec = read_native(unit)
        image = f"KFFAKE {on_fake.tuned}\n".encode()
        comps = [nd.Companion(name, bytes.fromhex(params), () if i == "-" else (int(i),),
                              (int(o),)) for name, params, i, o in companion_fields()]
        e = nd.fused_entry(rec, image="fused.bin", image_bytes=image, entry_name="interior_c5",
                           grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0, steps=5,
                           in_offset=0, out_offset=8, evidence={"method": "fused-operator"},
                           companions=comps)
        spec = nd.write_spec(out_dir / "loop.fused.json", [e], {"fused.bin": image})
        return SimpleNamespace(spec_path=spec, speedup=2.0, ci=(1.9, 2.1), steps=5, note="n")

    said: list[str] = []
    f = fusion_stage(lambda seq: on_fake.loop_command("b" * (seq + 4)), program,
                     tmp_path / "fusion", kernel="interior", steps=(5,), rounds=2,
                     progress=said.append, fuse=fuse)
    assert f.match is not None and f.vs_plain is not None and f.vs_one_launch is None, f.reason
    assert f.vs_plain.identical and f.check == "checksums identical"
    assert f.fused_groups == 3 and f.runs == 3  # the last run's groups (each run a process)
    assert not f.deployed and f.reason.startswith(
        "end to end against the plain program, inconclusive: 2 passes are too few"), f.reason
    assert said[:3] == ["recording the time loop natively (7 steps of interior)",
                        f"fusing 5 steps of {f.unit.name} (each verified, timed in replay)"
                        if f.unit else "", "running the program plain, fused"]
    assert (tmp_path / "fusion" / "deploy" / "deploy.interposer.tsv").is_file()
