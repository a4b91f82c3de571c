"""Deferral of a time loop whose step is several launches, run for real on the fake CUDA driver:
fake_loop.c's step "b" launches interior, then its companions edge (twice) and mix; a fused
entry listing those companions holds whole steps and runs every T of them as one launch of
interior_cT, and whatever could observe or reorder memory first runs what is held as the
original launches in their order, so that every buffer equals the unfused run's at every
observation point."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from deploy_run import (
    TIMEOUT_S,
    Run,
    companion_fields,
    fused_groups,
    loop_image_id,
    run,
    step_line,
    tuned_image,
    with_images,
)
from test_interposer_defer import TRIGGERS

from kernforge.testing.fakedriver import FakeCuda

STEPS = "b" * 13  # an odd number of steps: the fused run's IN differs while one is held
PER = 4  # launches a step: interior, edge, edge, mix


def fused(fake: FakeCuda, lib: Path, tmp: Path, script: str, *, steps: int = 5,
          direct: bool = False, env: dict[str, str] | None = None,
          lines: str | None = None) -> tuple[Run, str]:
    """``script`` under a fused deployment of the step, and the output of the plain program."""
    cmd = fake.loop_command(script, direct=direct)
    lines = lines if lines is not None else step_line(tuned_image(fake, tmp), steps) + "\n"
    alone = subprocess.run(cmd, env={**fake.env, **(env or {})}, capture_output=True,
                           text=True, check=True, timeout=TIMEOUT_S)
    return run(fake, lib, cmd, tmp, lines, env=env), alone.stdout


def unfused(r: Run) -> int:
    return int((r.log or {}).get("flushed_unfused", -1))


# ---- each flush trigger -------------------------------------------------------------------------
@pytest.mark.parametrize("direct", [False, True], ids=["cuGetProcAddress", "linked"])
@pytest.mark.parametrize("op", list(TRIGGERS.values()), ids=list(TRIGGERS))
def test_each_trigger_flushes_the_held_steps(fake: FakeCuda, lib: Path, tmp_path: Path, op: str,
                                             direct: bool) -> None:
    """13 steps of T=5: two groups fused, three whole steps (12 launches) run as originals."""
    r, expected = fused(fake, lib, tmp_path, STEPS + op + STEPS + op, direct=direct)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected
    assert fused_groups(r) == 4 and unfused(r) == 2 * 3 * PER, r.log


@pytest.mark.parametrize("before", range(1, 14))
@pytest.mark.parametrize("op", ["c", "y", "E", "f", "q"])
def test_a_flush_mid_step_runs_the_part_held_in_order(fake: FakeCuda, lib: Path,
                                                      tmp_path: Path, before: int,
                                                      op: str) -> None:
    """After the stencil, before its companions: the step held whole after a fused group runs
    first (it rewrites IN, faces included), then the stencil; its companions follow unheld."""
    r, expected = fused(fake, lib, tmp_path, "b" * before + "i" + op + "j" + STEPS + "c")
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected, (before, op)
    assert fused_groups(r) == (before - 1) // 5 + 2, r.log


BREAKS = {
    "another kernel between steps": STEPS + "k" + STEPS + "c",
    "a one-launch loop between steps": STEPS + "sssss" + STEPS + "c",
    "a second stream": STEPS + "BBBBBBB" + STEPS + "BBBB" + "c",
    "another kernel on a second stream": STEPS + "K" + STEPS + "c",
    "the NULL stream": STEPS + "aaaaaaa" + STEPS + "c",
    "a host-to-device copy into the loop's buffer": STEPS + "M" + STEPS + "c",
    "a companion with another scalar": STEPS + "v" + STEPS + "vvv" + STEPS + "c",
    "companions on another stream": STEPS + "o" + STEPS + "ooo" + STEPS + "c",
    "companions in another order": STEPS + "r" + STEPS + "rr" + STEPS + "c",
    "a step without its companions": STEPS + "i" + STEPS + "iii" + STEPS + "c",
    "companions without their step": STEPS + "j" + STEPS + "jjj" + STEPS + "c",
    "a step made in two parts": STEPS + "ij" + STEPS + "c",
}


@pytest.mark.parametrize("script", list(BREAKS.values()), ids=list(BREAKS))
def test_other_work_between_steps_sees_and_leaves_the_unfused_state(
        fake: FakeCuda, lib: Path, tmp_path: Path, script: str) -> None:
    r, expected = fused(fake, lib, tmp_path, script)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected and fused_groups(r) >= 4, (r.out, r.log)


@pytest.mark.parametrize("steps", [3, 5, 7])
def test_every_t_steps_run_as_one_launch(fake: FakeCuda, lib: Path, tmp_path: Path,
                                         steps: int) -> None:
    r, expected = fused(fake, lib, tmp_path, "b" * 200 + "c", steps=steps)
    assert r.rc == 0 and r.out == expected, r.err
    groups = (200 - 1) // steps  # the (T+1)-th step of each group stays held
    assert fused_groups(r) == groups and r.log
    assert unfused(r) == (200 - groups * steps) * PER
    assert r.log["entries"][0]["companions"] == 3


def test_a_fused_operator_without_the_companions_is_caught(fake: FakeCuda, lib: Path,
                                                           tmp_path: Path) -> None:
    """The comparison can fail: an operator that leaves the companions out changes the output."""
    lines = step_line(tuned_image(fake, tmp_path), 5, entry="interior_n5") + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS + "c", lines=lines)
    assert r.rc == 0 and fused_groups(r) == 2 and r.out != expected


def test_an_entry_with_other_scalars_holds_nothing(fake: FakeCuda, lib: Path,
                                                   tmp_path: Path) -> None:
    comps = companion_fields(v0=0.5)  # the entry's first edge has another v than the program's
    lines = step_line(tuned_image(fake, tmp_path), 5, companions=comps) + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS * 2 + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 0 and unfused(r) == 26  # each stencil held, then flushed


# ---- a companion is known by its image too -------------------------------------------------------
def imaged(fake: FakeCuda, tmp: Path, *images: str) -> str:
    """The step's entry with its companions' images (five fields each)."""
    comps = with_images(companion_fields(), *images)
    return step_line(tuned_image(fake, tmp), 5, companions=comps) + "\n"


def test_companions_from_their_recorded_image_fuse(fake: FakeCuda, lib: Path,
                                                   tmp_path: Path) -> None:
    lines = imaged(fake, tmp_path, loop_image_id(fake))
    r, expected = fused(fake, lib, tmp_path, STEPS * 2 + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 5 and unfused(r) == PER, r.log


OTHER_IMAGE = {  # script: fused groups, held launches run as the originals
    "every step": ("n" * 13 + "c", 0, 13),  # each stencil held, then flushed by its edge
    "one step mid-chain": (STEPS + "n" + STEPS + "c", 4, 3 * PER + 1 + 3 * PER),
}


@pytest.mark.parametrize(("script", "groups", "held"), list(OTHER_IMAGE.values()),
                         ids=list(OTHER_IMAGE))
def test_a_companion_of_its_name_from_another_image_runs_unfused(
        fake: FakeCuda, lib: Path, tmp_path: Path, script: str, groups: int,
        held: int) -> None:
    """Step "n"'s first edge: the same name and parameter bytes, from another module image (as
    CuPy builds one per dtype). It is not the companion: what is held runs as the originals,
    then n's companions run; the steps around it fuse."""
    lines = imaged(fake, tmp_path, loop_image_id(fake))
    r, expected = fused(fake, lib, tmp_path, script, lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == groups and unfused(r) == held, r.log


@pytest.mark.parametrize("images", [(), ("-",)], ids=["four fields", "image -"])
def test_without_an_image_a_kernel_of_its_name_from_any_image_is_the_companion(
        fake: FakeCuda, lib: Path, tmp_path: Path, images: Sequence[str]) -> None:
    """What the image prevents: in a line without it (written before it existed, or "-"),
    the edge of step "n" from the other image is taken for the companion, and a loop of such
    steps is fused (the fake's two images hold the same kernels, so here the output does not
    differ; on a GPU the fused function would stand for a kernel it was not verified
    against)."""
    comps = with_images(companion_fields(), *images) if images else None
    lines = step_line(tuned_image(fake, tmp_path), 5, companions=comps) + "\n"
    r, expected = fused(fake, lib, tmp_path, "n" * 13 + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 2 and unfused(r) == 3 * PER, r.log


def test_an_entry_naming_the_other_image_fuses_only_its_steps(fake: FakeCuda, lib: Path,
                                                              tmp_path: Path) -> None:
    """The first edge from the other image, the rest from the loop's: steps "n" fuse, and steps
    "b" (every launch from the loop's image) do not."""
    lines = imaged(fake, tmp_path, loop_image_id(fake, other=True), loop_image_id(fake))
    r, expected = fused(fake, lib, tmp_path, "n" * 13 + "b" * 13 + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 2 and unfused(r) == 3 * PER + 13, r.log


# ---- process exit and contexts going away ----------------------------------------------------
@pytest.mark.parametrize("end", ["x", "ix", "X", "iX", "R", "D"],
                         ids=["exit", "exit mid-step", "cuCtxDestroy", "cuCtxDestroy mid-step",
                              "primary release", "primary reset"])
def test_steps_held_at_exit_or_context_teardown_run_first(
        fake: FakeCuda, lib: Path, tmp_path: Path, end: str) -> None:
    """The loop's buffers are a shared file mapping (host-mapped memory): what the kernels
    left there is read after the process ended, with no copy or sync before its end."""
    script = STEPS + end
    maps = {}
    for mode in ("plain", "fused"):
        maps[mode] = tmp_path / f"{mode}.bin"
        env = {"FAKE_LOOP_MAP": str(maps[mode])}
        if mode == "plain":
            r = run(fake, lib, fake.loop_command(script), tmp_path, None, env=env, preload=[])
        else:
            r, _ = fused(fake, lib, tmp_path, script, env=env)
            assert not end.endswith("x") or fused_groups(r) == 2, r.log
        assert r.rc == 0, r.err
    assert maps["fused"].read_bytes() == maps["plain"].read_bytes()


def test_an_exit_handler_of_the_program_sees_the_unfused_state(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    r, expected = fused(fake, lib, tmp_path, STEPS + "ix", env={"FAKE_LOOP_ATEXIT": "1"})
    assert r.rc == 0 and "obs atexit" in r.out and r.out == expected, r.err


# ---- the switch ----------------------------------------------------------------------------------
def test_kernforge_fuse_0_runs_the_originals(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    r, expected = fused(fake, lib, tmp_path, STEPS * 3 + "c", env={"KERNFORGE_FUSE": "0"})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert r.log and r.log["fusion"] is False and fused_groups(r) == 0 and unfused(r) == 0


# ---- the line format -------------------------------------------------------------------------------
EDGE0, EDGE1, MIX = companion_fields()
BAD = {
    "fewer companions than C": ("fuse:5:0:8:3", [EDGE0, EDGE1]),
    "more companions than C": ("fuse:5:0:8:2", [EDGE0, EDGE1, MIX]),
    "C of 0": ("fuse:5:0:8:0", []),
    "C of 9": ("fuse:5:0:8:9", [EDGE0] * 9),
    "a C that is not a number": ("fuse:5:0:8:x", [EDGE0]),
    "odd hex": ("fuse:5:0:8:1", [("edge", EDGE0[1][:-1], "-", "0")]),
    "not hex": ("fuse:5:0:8:1", [("edge", "zz" + EDGE0[1][2:], "-", "0")]),
    "an unaligned slot": ("fuse:5:0:8:1", [("edge", EDGE0[1], "-", "4")]),
    "a slot past the params": ("fuse:5:0:8:1", [("edge", EDGE0[1], "-", "24")]),
    "a slot both IN and OUT": ("fuse:5:0:8:1", [("mix", MIX[1], "0,8", "8")]),
    "a slot twice": ("fuse:5:0:8:1", [("mix", MIX[1], "0,0", "8")]),
    "a trailing comma": ("fuse:5:0:8:1", [("mix", MIX[1], "0,", "8")]),
    "a signed slot": ("fuse:5:0:8:1", [("mix", MIX[1], "-8", "8")]),
    "an empty slot field": ("fuse:5:0:8:1", [("mix", MIX[1], "", "8")]),
    "a slot in no params": ("fuse:5:0:8:1", [("mix", "-", "0", "-")]),
    "an image of 15 hex digits": ("fuse:5:0:8:1:5", [(*EDGE0, "0" * 14 + "1")]),
    "an image of 17 hex digits": ("fuse:5:0:8:1:5", [(*EDGE0, "0" * 16 + "1")]),
    "an image that is not hex": ("fuse:5:0:8:1:5", [(*EDGE0, "g" * 16)]),
    "an image with a sign": ("fuse:5:0:8:1:5", [(*EDGE0, "+" + "1" * 15)]),
    "an image of 0": ("fuse:5:0:8:1:5", [(*EDGE0, "0" * 16)]),
    "an empty image": ("fuse:5:0:8:1:5", [(*EDGE0, "")]),
    "five fields, W absent": ("fuse:5:0:8:1", [(*EDGE0, "-")]),
    "four fields, W of 5": ("fuse:5:0:8:1:5", [EDGE0]),
    "W of 7": ("fuse:5:0:8:1:7", [(*EDGE0, "-", "-", "-")]),
    "a geometry without shmem": ("fuse:5:0:8:1:6", [(*EDGE0, "-", "1,1,1/1,1,1")]),
    "a geometry of 0 blocks": ("fuse:5:0:8:1:6", [(*EDGE0, "-", "0,1,1/1,1,1/0")]),
    "a geometry of two numbers": ("fuse:5:0:8:1:6", [(*EDGE0, "-", "1,1/1,1,1/0")]),
    "a geometry with a sign": ("fuse:5:0:8:1:6", [(*EDGE0, "-", "1,1,1/1,1,1/-1")]),
    "a geometry of 2^32 shmem": ("fuse:5:0:8:1:6", [(*EDGE0, "-", "1,1,1/1,1,1/4294967296")]),
    "a geometry with a fourth part": ("fuse:5:0:8:1:6", [(*EDGE0, "-", "1,1,1/1,1,1/0/0")]),
    "six fields, W of 5": ("fuse:5:0:8:1:5", [(*EDGE0, "-", "-")]),
    "W of 3": ("fuse:5:0:8:1:3", [EDGE0[:3]]),
    "W that is not a number": ("fuse:5:0:8:1:x", [(*EDGE0, "-")]),
    "W after no C": ("fuse:5:0:8::5", [(*EDGE0, "-")]),
}


@pytest.mark.parametrize(("fuse", "comps"), list(BAD.values()), ids=list(BAD))
def test_an_entry_with_malformed_companions_is_skipped_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, fuse: str,
        comps: list[Sequence[str]]) -> None:
    lines = step_line(tuned_image(fake, tmp_path), 5, fuse=fuse, companions=comps) + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0
    assert len(r.messages) == 1 and "malformed" in r.messages[0], r.err


@pytest.mark.parametrize("wide", [False, True], ids=["four fields", "five fields"])
def test_lines_without_companions_stay_valid_beside_one_with(fake: FakeCuda, lib: Path,
                                                             tmp_path: Path, wide: bool) -> None:
    """A heat entry in the old 14-field form and the step's entry (its companions with or
    without their images), in one file: both fuse."""
    from deploy_run import fused_line

    image = tuned_image(fake, tmp_path)
    comps = with_images(companion_fields(), loop_image_id(fake)) if wide else None
    lines = fused_line(image, 5) + "\n" + step_line(image, 5, companions=comps) + "\n"
    r, expected = fused(fake, lib, tmp_path, "s" * 13 + "c" + STEPS + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert r.log and [e["fused_groups"] for e in r.log["entries"]] == [2, 2], r.log


# ---- the contract with kernforge's writer -----------------------------------------------------
@pytest.mark.parametrize("which", [None, "recorded", "another", "placed"])
def test_a_fused_entry_with_companions_written_by_kernforge_runs_in_the_interposer(
        fake: FakeCuda, lib: Path, tmp_path: Path, which: str | None) -> None:
    """deploy/native.py's fused entry with Companion()s, through interposer_lines, fuses
    fake_loop's steps of interior and its companions: companions without an image or with the
    image they come from (and their geometry: "placed"); with another image's id, nothing
    (every stencil flushed)."""
    import struct

    import numpy as np

    from kernforge.core.native import NativeParam, NativeRecording, NativeRegion
    from kernforge.deploy import native as nd

    loaded = f"KFFAKE {fake.kernels}".encode() + b"\0"  # the image as fake_loop loads it
    raw = bytes(16) + (1000).to_bytes(4, "little") + bytes(4) + struct.pack("<d", 0.25)
    rec = NativeRecording(tmp_path / "unit", "interior", "interior", "img-fake-loop-step", "text",
                          (8, 1, 1), (128, 1, 1), 0,
                          (NativeParam(0, 8, ((0, 0),)), NativeParam(8, 8, ((8, 1),)),
                           NativeParam(16, 4), NativeParam(24, 8)), raw,
                          (NativeRegion(0x7000, 8000, "alloc", "a", None),
                           NativeRegion(0x9000, 8000, "alloc", "b", None)),
                          identity={"device": "fake"},
                          loader=lambda blob: np.frombuffer(loaded, dtype=np.uint8))
    ids = {None: None, "recorded": loop_image_id(fake), "another": loop_image_id(fake, True),
           "placed": loop_image_id(fake)}
    geometry = ((1, 1, 1), (1, 1, 1), 0) if which == "placed" else None
    comps = [nd.Companion(name, bytes.fromhex(params), tuple(map(int, ins.split(",")))
                          if ins != "-" else (), tuple(map(int, outs.split(","))),
                          image=ids[which], geometry=geometry)
             for name, params, ins, outs in companion_fields()]
    image = f"KFFAKE {fake.tuned}\n".encode()
    e = nd.fused_entry(rec, image="fused.img", image_bytes=image, entry_name="interior_c7",
                       grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0, steps=7, in_offset=0,
                       out_offset=8, evidence={}, companions=comps)
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"fused.img": image}))
    lines = nd.interposer_lines(spec)
    width = {None: "", "placed": ":6"}.get(which, ":5")
    assert lines.splitlines()[1].split("\t")[13] == "fuse:7:0:8:3" + width
    r, expected = fused(fake, lib, tmp_path, "b" * 30 + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    if which == "another":
        assert fused_groups(r) == 0 and unfused(r) == 30, r.log
    else:
        assert fused_groups(r) == 4 and unfused(r) == 2 * PER, r.log
