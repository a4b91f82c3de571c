"""Deferral in the interposer (temporal fusion), run for real on the fake CUDA driver: a time
loop's launches are held and every T of them run as one fused launch, and whatever could
observe or reorder memory first runs what is held, so that every buffer equals the unfused
run's at every observation point (fake_loop.c prints a hash of every buffer at each)."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from deploy_run import (
    TIMEOUT_S,
    Run,
    fused_groups,
    fused_line,
    heat_key,
    line,
    plain,
    run,
    tuned_image,
)

from kernforge.testing.fakedriver import FakeCuda

STEPS = "s" * 13  # an odd number of steps: the fused run's IN differs while one is held


def fused(fake: FakeCuda, lib: Path, tmp: Path, script: str, *, steps: int = 5,
          direct: bool = False, env: dict[str, str] | None = None,
          lines: str | None = None) -> tuple[Run, str]:
    """``script`` under a fused deployment of heat, and the output of the plain program."""
    cmd = fake.loop_command(script, direct=direct)
    lines = lines if lines is not None else fused_line(tuned_image(fake, tmp), steps) + "\n"
    alone = subprocess.run(cmd, env={**fake.env, **(env or {})}, capture_output=True,
                           text=True, check=True, timeout=TIMEOUT_S)
    return run(fake, lib, cmd, tmp, lines, env=env), alone.stdout


# ---- each flush trigger -------------------------------------------------------------------------
TRIGGERS = {
    "copy after an odd number of steps": "c", "async copy and stream sync": "C",
    "context sync": "y", "stream sync": "p", "stream query": "q",
    "event record and sync": "e", "event record and query": "E", "stream wait": "w",
    "host function": "h", "memset": "m", "alloc and free": "f", "graph launch": "g",
    "module unload": "u", "context pop and push": "P", "an unknown driver function": "z",
    "stream capture and graph launch": "G", "an unknown function of 11 arguments": "Z",
}


@pytest.mark.parametrize("direct", [False, True], ids=["cuGetProcAddress", "linked"])
@pytest.mark.parametrize("op", list(TRIGGERS.values()), ids=list(TRIGGERS))
def test_each_trigger_flushes_what_is_held(fake: FakeCuda, lib: Path, tmp_path: Path, op: str,
                                           direct: bool) -> None:
    r, expected = fused(fake, lib, tmp_path, STEPS + op + STEPS + op, direct=direct)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected
    assert fused_groups(r) == 4 and r.log and r.log["flushed_unfused"] == 6, r.log


WRITERS = {
    "another kernel between steps": STEPS + "k" + STEPS + "c",
    "a second stream": STEPS + "ttttttt" + STEPS + "tttt" + "c",
    "another kernel on a second stream": STEPS + "K" + STEPS + "c",
    "the NULL stream": STEPS + "ddddddd" + STEPS + "c",
    "a host-to-device copy into the loop's buffer": STEPS + "M" + STEPS + "c",
}


@pytest.mark.parametrize("script", list(WRITERS.values()), ids=list(WRITERS))
def test_other_work_between_steps_sees_and_leaves_the_unfused_state(
        fake: FakeCuda, lib: Path, tmp_path: Path, script: str) -> None:
    r, expected = fused(fake, lib, tmp_path, script)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected and fused_groups(r) >= 4, (r.out, r.log)


@pytest.mark.parametrize("steps", [3, 5, 7, 63])
def test_every_t_steps_run_as_one_launch(fake: FakeCuda, lib: Path, tmp_path: Path,
                                         steps: int) -> None:
    r, expected = fused(fake, lib, tmp_path, "s" * 200 + "c", steps=steps)
    assert r.rc == 0 and r.out == expected, r.err
    groups = (200 - 1) // steps  # the (T+1)-th launch of each group stays held
    assert fused_groups(r) == groups and r.log
    assert r.log["flushed_unfused"] == 200 - groups * steps


def test_a_fused_operator_of_the_wrong_length_is_caught(fake: FakeCuda, lib: Path,
                                                        tmp_path: Path) -> None:
    """The comparison can fail: 3 steps fused where the entry says 5 changes the output."""
    lines = fused_line(tuned_image(fake, tmp_path), 5, entry="heat_x3") + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS + "c", lines=lines)
    assert r.rc == 0 and fused_groups(r) == 2 and r.out != expected


# ---- process exit and contexts going away ----------------------------------------------------
@pytest.mark.parametrize("end", ["x", "X", "R", "D"],
                         ids=["exit", "cuCtxDestroy", "primary release", "primary reset"])
def test_launches_held_at_exit_or_context_teardown_run_first(
        fake: FakeCuda, lib: Path, tmp_path: Path, end: str) -> None:
    """The loop's buffers are a shared file mapping (host-mapped memory): what the kernels
    left there is read after the process ended, with no copy or sync before its end."""
    script = STEPS + end
    maps = {}
    for mode in ("plain", "fused"):
        maps[mode] = tmp_path / f"{mode}.bin"
        env = {"FAKE_LOOP_MAP": str(maps[mode])}
        if mode == "plain":
            r = run(fake, lib, fake.loop_command(script), tmp_path, None, env=env,
                    preload=[])
        else:  # _exit() leaves no counts; "x" shows that these 13 steps run 2 fused groups
            r, _ = fused(fake, lib, tmp_path, script, env=env)
            assert end != "x" or fused_groups(r) == 2, r.log
        assert r.rc == 0, r.err
    assert maps["fused"].read_bytes() == maps["plain"].read_bytes()


def test_an_exit_handler_of_the_program_sees_the_unfused_state(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    r, expected = fused(fake, lib, tmp_path, STEPS + "x", env={"FAKE_LOOP_ATEXIT": "1"})
    assert r.rc == 0 and "obs atexit" in r.out and r.out == expected, r.err


# ---- the switch and the fallback ----------------------------------------------------------------
def test_kernforge_fuse_0_runs_the_originals(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    r, expected = fused(fake, lib, tmp_path, STEPS * 3 + "c", env={"KERNFORGE_FUSE": "0"})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert r.log and r.log["fusion"] is False and fused_groups(r) == 0
    assert r.log["flushed_unfused"] == 0


def test_a_one_launch_entry_of_the_same_kernel_applies_when_fusion_is_off(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    image = tuned_image(fake, tmp_path)
    lines = fused_line(image, 5) + "\n" + line("heat", image, key=heat_key()) + "\n"
    for fuse, groups in (("1", 2), ("0", 0)):
        r, expected = fused(fake, lib, tmp_path, STEPS + "c", lines=lines,
                            env={"KERNFORGE_FUSE": fuse})
        assert r.rc == 0 and r.out == expected and fused_groups(r) == groups, r.err
        assert r.replaced == (13 if fuse == "0" else 0)


@pytest.mark.parametrize("damage", ["garbage", "missing", "no such function"])
def test_a_fused_image_that_fails_to_load_runs_the_originals_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, damage: str) -> None:
    image = tmp_path / "fused.bin"
    if damage == "garbage":
        image.write_bytes(b"\x7fELF not an image\n")
    elif damage == "no such function":
        image.write_text(f"KFFAKE {fake.tuned}\n")
    entry = "heat_x9" if damage == "no such function" else None
    lines = fused_line(image, 5, entry=entry) + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS * 3 + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0
    assert len(r.messages) == 1 and "runs unfused" in r.messages[0], r.err
    assert r.log and r.log["entries"][0]["load_failures"] == 1


# ---- threads -------------------------------------------------------------------------------------
def test_32_threads_fuse_chains_on_their_own_streams(fake: FakeCuda, lib: Path,
                                                     tmp_path: Path) -> None:
    cmd = fake.threads_command(32, 41, streams=True)
    lines = fused_line(tuned_image(fake, tmp_path), 5) + "\n"
    expected = plain(fake, cmd)
    for _ in range(3):
        r = run(fake, lib, cmd, tmp_path, lines)
        assert r.rc == 0 and r.out == expected and not r.messages, r.err
        assert r.log and fused_groups(r) > 0
        assert fused_groups(r) * 5 + r.log["flushed_unfused"] == 32 * 41, r.log


# ---- the line format -------------------------------------------------------------------------------
BAD_FUSE = ["fuse:4:0:8", "fuse:1:0:8", "fuse:65:0:8", "fuse:5:0:0", "fuse:5:4:16",
            "fuse:5:0:32", "fuse:5:0", "fuse:5:0:8:1", "fuze:5:0:8", "fuse:5:-8:0", "fuse:5:0:8 ",
            "fuse:05x:0:8"]


@pytest.mark.parametrize("fuse", BAD_FUSE)
def test_a_malformed_fuse_field_skips_its_line_told_once(fake: FakeCuda, lib: Path,
                                                         tmp_path: Path, fuse: str) -> None:
    lines = fused_line(tuned_image(fake, tmp_path), 5, fuse=fuse) + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0
    assert len(r.messages) == 1 and "malformed" in r.messages[0], r.err


def test_a_fused_entry_needs_a_key(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    lines = fused_line(tuned_image(fake, tmp_path), 5, key="*") + "\n"
    r, _ = fused(fake, lib, tmp_path, STEPS + "c", lines=lines)
    assert "has no key" in r.err and fused_groups(r) == 0


# ---- the contract with kernforge's writer -----------------------------------------------------
def test_a_fused_entry_written_by_kernforge_runs_in_the_interposer(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """deploy/native.py's fused entry, through interposer_lines, fuses fake_loop's heat."""
    import numpy as np

    from kernforge.core.native import NativeParam, NativeRecording, NativeRegion
    from kernforge.deploy import native as nd

    loaded = f"KFFAKE {fake.kernels}".encode() + b"\0"  # the image as fake_loop loads it
    raw = bytes(16) + (1000).to_bytes(4, "little") + bytes(4) + struct.pack("<d", 0.25)
    # the blob id is content-addressed in a real unit (deploy.native caches ids by it)
    rec = NativeRecording(tmp_path / "unit", "heat", "heat", "img-fake-loop", "text", (8, 1, 1),
                          (128, 1, 1), 0,
                          (NativeParam(0, 8, ((0, 0),)), NativeParam(8, 8, ((8, 1),)),
                           NativeParam(16, 4), NativeParam(24, 8)), raw,
                          (NativeRegion(0x7000, 8000, "alloc", "a", None),
                           NativeRegion(0x9000, 8000, "alloc", "b", None)),
                          identity={"device": "fake"},
                          loader=lambda blob: np.frombuffer(loaded, dtype=np.uint8))
    image = f"KFFAKE {fake.tuned}\n".encode()
    e = nd.fused_entry(rec, image="fused.img", image_bytes=image, entry_name="heat_x7",
                       grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0, steps=7, in_offset=0,
                       out_offset=8, evidence={})
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"fused.img": image}))
    r, expected = fused(fake, lib, tmp_path, "s" * 30 + "c", lines=nd.interposer_lines(spec))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 4 and r.log and r.log["flushed_unfused"] == 2
