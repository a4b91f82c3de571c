"""Deferral of a time loop whose step is several launches, run for real on the fake CUDA driver:
fake_loop.c's step "b" launches interior, then its companions edge (twice) and mix; a fused
entry listing those companions holds whole steps and runs every T of them as one launch of
interior_cT, and whatever could observe or reorder memory first runs what is held as the
original launches in their order, so that every buffer equals the unfused run's at every
observation point."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from deploy_run import (
    TIMEOUT_S,
    Run,
    companion_fields,
    fused_groups,
    run,
    step_line,
    tuned_image,
)
from test_interposer_defer import TRIGGERS

from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda

STEPS = "b" * 13  # an odd number of steps: the fused run's IN differs while one is held
PER = 4  # launches a step: interior, edge, edge, mix


@pytest.fixture(scope="module")
def lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return interposer.build(tmp_path_factory.mktemp("interposer"))


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
}


@pytest.mark.parametrize(("fuse", "comps"), list(BAD.values()), ids=list(BAD))
def test_an_entry_with_malformed_companions_is_skipped_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, fuse: str,
        comps: list[tuple[str, str, str, str]]) -> None:
    lines = step_line(tuned_image(fake, tmp_path), 5, fuse=fuse, companions=comps) + "\n"
    r, expected = fused(fake, lib, tmp_path, STEPS + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0
    assert len(r.messages) == 1 and "malformed" in r.messages[0], r.err


def test_lines_without_companions_stay_valid_beside_one_with(fake: FakeCuda, lib: Path,
                                                             tmp_path: Path) -> None:
    """A heat entry in the old 14-field form and the step's entry, in one file: both fuse."""
    from deploy_run import fused_line

    image = tuned_image(fake, tmp_path)
    lines = fused_line(image, 5) + "\n" + step_line(image, 5) + "\n"
    r, expected = fused(fake, lib, tmp_path, "s" * 13 + "c" + STEPS + "c", lines=lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert r.log and [e["fused_groups"] for e in r.log["entries"]] == [2, 2], r.log


# ---- the contract with kernforge's writer -----------------------------------------------------
def test_a_fused_entry_with_companions_written_by_kernforge_runs_in_the_interposer(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """deploy/native.py's fused entry with Companion()s, through interposer_lines, fuses
    fake_loop's steps of interior and its companions."""
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
    comps = [nd.Companion(name, bytes.fromhex(params), tuple(map(int, ins.split(",")))
                          if ins != "-" else (), tuple(map(int, outs.split(","))))
             for name, params, ins, outs in companion_fields()]
    image = f"KFFAKE {fake.tuned}\n".encode()
    e = nd.fused_entry(rec, image="fused.img", image_bytes=image, entry_name="interior_c7",
                       grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0, steps=7, in_offset=0,
                       out_offset=8, evidence={}, companions=comps)
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"fused.img": image}))
    r, expected = fused(fake, lib, tmp_path, "b" * 30 + "c", lines=nd.interposer_lines(spec))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 4 and unfused(r) == 2 * PER
