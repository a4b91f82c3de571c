"""What a deployed kernel assumed besides the launch's parameters and geometry, checked by the
interposer (record/native/kf_guard.c), run for real on the fake CUDA driver with fake_guard.c:
the launch attributes of every launch a fused entry holds (its first step's included), and the
module globals whose values a fused or tuned kernel baked in."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_run import (
    TIMEOUT_S,
    Run,
    fused_groups,
    line,
    loop_image_id,
    run,
    step_line,
    tuned_image,
)
from test_interposer_fuzz import SANITIZER_ENV, check, mutated, sanitized  # noqa: F401

from kernforge.deploy.native import image_id
from kernforge.testing.fakedriver import FakeCuda

STEPS = "b" * 13  # steps of interior and its three companions: two fused groups of T=5


def attr(ident: int, value: int, pad: int = 0) -> str:
    """One CUlaunchAttribute as hex: ``ident``, ``value`` in its first int (cluster dimensions:
    value, 1, 1), the padding and the value's unused bytes ``pad``."""
    used = struct.pack("<III", value, 1, 1) if ident in (4, 11) else struct.pack("<I", value)
    return (struct.pack("<II", ident, pad) + used + bytes([pad]) * (64 - len(used))).hex()


def guarded(fake: FakeCuda, lib: Path, tmp: Path, script: str, lines: str,
            env: dict[str, str] | None = None) -> tuple[Run, str]:
    """``script`` of fake_guard under ``lines``, and the plain program's output."""
    cmd = fake.guard_command(script)
    alone = subprocess.run(cmd, env={**fake.env, **(env or {})}, capture_output=True,
                           text=True, check=True, timeout=TIMEOUT_S)
    return run(fake, lib, cmd, tmp, lines, env=env), alone.stdout


# ---- launch attributes ----------------------------------------------------------------------
ATTRIBUTES = {"cluster dimensions": (4, 2), "cooperative": (2, 1), "priority": (8, 1),
              "programmatic stream serialization": (6, 1), "memory sync domain": (10, 1),
              "shared memory carveout": (14, 50), "an id this interposer does not know": (99, 1)}
ROLES = {"the stencil": 0, "the first companion": 1, "the last companion": 3}


@pytest.mark.parametrize("role", list(ROLES.values()), ids=list(ROLES))
@pytest.mark.parametrize(("ident", "value"), list(ATTRIBUTES.values()), ids=list(ATTRIBUTES))
def test_a_launch_with_an_attribute_it_was_not_recorded_with_is_not_held(
        fake: FakeCuda, lib: Path, tmp_path: Path, role: int, ident: int, value: int) -> None:
    """Every step's launch (role) has the attribute, the first step's included; the line
    records none: nothing is fused, what was held runs as the originals, in order."""
    lines = step_line(tuned_image(fake, tmp_path), 5) + "\n"
    r, expected = guarded(fake, lib, tmp_path, STEPS + "c", lines,
                          env={"FAKE_GUARD_ATTR": f"{role}:{ident}:{value}"})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 0, r.log


def test_without_attributes_the_steps_fuse(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    lines = step_line(tuned_image(fake, tmp_path), 5) + "\n"
    r, expected = guarded(fake, lib, tmp_path, STEPS + "c", lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 2, r.log


@pytest.mark.parametrize(("role", "ident", "value"), [(0, 4, 2), (3, 8, 1), (1, 2, 1)])
def test_launches_with_their_recorded_attributes_fuse(fake: FakeCuda, lib: Path, tmp_path: Path,
                                                      role: int, ident: int, value: int) -> None:
    """The line records the attribute (its padding other than the program's, which changes
    from step to step): the bytes the attribute uses are compared, and they match."""
    recorded = attr(ident, value, 0x55)
    lines = step_line(tuned_image(fake, tmp_path), 5) + f"\tattrs:{role}:{recorded}\n"
    r, expected = guarded(fake, lib, tmp_path, STEPS + "c", lines,
                          env={"FAKE_GUARD_ATTR": f"{role}:{ident}:{value}",
                               "FAKE_GUARD_PAD": "1"})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 2, r.log


@pytest.mark.parametrize("env", ["", "3:8:2", "3:6:1"], ids=["none", "another value",
                                                             "another attribute"])
def test_launches_without_the_recorded_attribute_are_not_held(
        fake: FakeCuda, lib: Path, tmp_path: Path, env: str) -> None:
    lines = step_line(tuned_image(fake, tmp_path), 5) + f"\tattrs:3:{attr(8, 1)}\n"
    r, expected = guarded(fake, lib, tmp_path, STEPS + "c", lines, env={"FAKE_GUARD_ATTR": env})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 0, r.log


def test_an_attribute_from_a_later_step_on_ends_the_chain_there(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """Steps 0 to 6 without it fuse once (5 steps, the 6th held, then the 7th's stencil); from
    step 7 on the stencil has a cluster: nothing more is held."""
    lines = step_line(tuned_image(fake, tmp_path), 5) + "\n"
    r, expected = guarded(fake, lib, tmp_path, STEPS + "c", lines,
                          env={"FAKE_GUARD_ATTR": "0:4:2:7"})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 1, r.log


# ---- guarded globals ----------------------------------------------------------------------------
BAKED = struct.pack("<d", 0.25)  # cheat_c as fake_kernels.c's cheat_x5 and tuned cheat bake it
BIAS = struct.pack("<4d", 0.5, 0.25, 0.125, 0.0625)  # fake_kernels.c's global bias


def guard_field(image: str, value: bytes = BAKED, symbol: str = "cheat_c") -> str:
    """A guard: fake_guard's global ``symbol`` of the module image ``image`` holds ``value``."""
    return f"guard:{image}:{len(value)}:{image_id(value)}:{symbol}"


def cheat_line(fake: FakeCuda, tmp: Path, *guards: str, fused: bool = True) -> str:
    """cheat's entry: fused (cheat_x5, T=5) or a one-launch replacement (the tuned cheat),
    with ``guards`` after field 14."""
    key = "xx" * 16 + (1000).to_bytes(4, "little").hex()
    head = line("cheat", tuned_image(fake, tmp), key=key, entry="cheat_x5" if fused else None,
                new_grid="1,1,1" if fused else "8,1,1", new_block="1,1,1" if fused else "128,1,1")
    return "\t".join([head, "fuse:5:0:8" if fused else "-", *guards]) + "\n"


def entry(r: Run) -> dict[str, int]:
    assert r.log and len(r.log["entries"]) == 1, r.log
    return dict(r.log["entries"][0])


G13 = "g" * 13  # cheat steps: two fused groups of T=5, the last three steps unfused


def test_an_unchanged_global_is_read_at_each_chain_s_first_fused_launch(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """Three chains (the copies between them flush): three reads, once each, and they fuse."""
    r, expected = guarded(fake, lib, tmp_path, G13 + "M" + G13 + "O" + G13 + "c",
                          cheat_line(fake, tmp_path, guard_field(loop_image_id(fake))))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 6 and entry(r)["guard_checks"] == 3, r.log


def test_a_global_changed_before_the_loop_runs_the_originals_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    r, expected = guarded(fake, lib, tmp_path, "W" + G13 * 2 + "c",
                          cheat_line(fake, tmp_path, guard_field(loop_image_id(fake))))
    assert r.rc == 0 and r.out == expected, r.err
    assert fused_groups(r) == 0 and entry(r)["guard_refusals"] == 1, r.log
    assert len(r.messages) == 1 and "cheat_c" in r.messages[0] and "unfused" in r.messages[0]


@pytest.mark.parametrize("write", ["W", "A", "Z", "K"], ids=[
    "cuMemcpyHtoD", "cuMemcpyHtoDAsync", "cuMemsetD8", "a kernel writing it"])
def test_a_global_written_mid_run_flushes_then_runs_the_originals(
        fake: FakeCuda, lib: Path, tmp_path: Path, write: str) -> None:
    """The write flushes the three held steps (they run before it, with the old value); the
    next chain reads the global again before its first fused launch, finds another value and
    runs unfused from then on."""
    r, expected = guarded(fake, lib, tmp_path, G13 + write + G13 * 2 + "c",
                          cheat_line(fake, tmp_path, guard_field(loop_image_id(fake))))
    assert r.rc == 0 and r.out == expected, r.err
    assert fused_groups(r) == 2 and entry(r)["guard_checks"] == 2, r.log
    assert len(r.messages) == 1 and "cheat_c" in r.messages[0], r.err


def test_a_global_written_with_its_own_value_is_read_again_and_fuses(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    r, expected = guarded(fake, lib, tmp_path, G13 + "V" + G13 + "c",
                          cheat_line(fake, tmp_path, guard_field(loop_image_id(fake))))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 4 and entry(r)["guard_checks"] == 2, r.log


def test_without_the_guard_a_changed_global_goes_unseen(fake: FakeCuda, lib: Path,
                                                        tmp_path: Path) -> None:
    """What the guard prevents: the same line without it fuses with the stale value."""
    r, expected = guarded(fake, lib, tmp_path, "W" + G13 + "c", cheat_line(fake, tmp_path))
    assert r.rc == 0 and fused_groups(r) == 2 and r.out != expected, r.log


@pytest.mark.parametrize("field", ["size", "symbol", "image"])
def test_a_guard_that_cannot_hold_runs_the_originals(fake: FakeCuda, lib: Path, tmp_path: Path,
                                                     field: str) -> None:
    own = loop_image_id(fake)
    g = {"size": guard_field(own, BAKED + bytes(8)),
         "symbol": guard_field(own, symbol="no_such_global"),
         "image": guard_field(loop_image_id(fake, other=True))}[field]
    r, expected = guarded(fake, lib, tmp_path, G13 + "c", cheat_line(fake, tmp_path, g))
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0, r.log
    assert len(r.messages) == 1, r.err


def test_a_guarded_one_launch_replacement(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """The tuned cheat (its coefficient baked in) replaces launches until the program writes
    the global; then the original runs, told once. The global is read at the first replaced
    launch and after each write to it (V: its own value; W: another), not after copies into a
    buffer (M) or another global (O)."""
    lines = cheat_line(fake, tmp_path, guard_field(loop_image_id(fake)), fused=False)
    r, expected = guarded(fake, lib, tmp_path,
                          "g" * 10 + "MO" + "g" * 5 + "V" + "g" * 5 + "W" + "g" * 10 + "c", lines)
    assert r.rc == 0 and r.out == expected, r.err
    assert r.replaced == 20 and entry(r)["guard_checks"] == 3, r.log
    assert len(r.messages) == 1 and "unchanged" in r.messages[0], r.err


# ---- the line format ------------------------------------------------------------------------
def bad_fields(image: str) -> dict[str, str]:
    g = guard_field(image)
    head, _, tail = g.partition(":8:")
    return {
        "a guard without its name": g.rsplit(":", 1)[0] + ":",
        "a guard of size 0": f"{head}:0:{tail}",
        "a guard past 1 MiB": f"{head}:1048577:{tail}",
        "a guard with a short hash": g.replace(image_id(BAKED), image_id(BAKED)[1:]),
        "a guard with an image of 0": "guard:" + "0" * 16 + g[22:],
        "a guard twice": f"{g}\t{g}",
        "nine guards": "\t".join(guard_field(image, symbol=f"g{i}") for i in range(9)),
        "an unknown tag": "check:1",
        "an empty field": "",
        "attrs on a role past the companions": "attrs:1:" + attr(8, 1),
        "attrs of 71 bytes": "attrs:0:" + attr(8, 1)[:-2],
        "attrs that are not hex": "attrs:0:" + "zz" + attr(8, 1)[2:],
        "attrs twice": f"attrs:0:{attr(8, 1)}\tattrs:0:{attr(8, 1)}",
        "seventeen attrs": "attrs:0:" + attr(8, 1) * 17,
    }


@pytest.mark.parametrize("case", list(bad_fields("1" * 16)))
def test_a_malformed_attrs_or_guard_field_skips_its_line_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, case: str) -> None:
    lines = cheat_line(fake, tmp_path, bad_fields(loop_image_id(fake))[case])
    r, expected = guarded(fake, lib, tmp_path, G13 + "c", lines)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0, r.log
    assert len(r.messages) == 1 and "malformed" in r.messages[0], r.err


def test_attrs_on_a_one_launch_line_skip_it(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    lines = cheat_line(fake, tmp_path, "attrs:0:" + attr(8, 1), fused=False)
    r, _ = guarded(fake, lib, tmp_path, G13 + "c", lines)
    assert r.rc == 0 and r.replaced == 0 and "malformed" in r.err, r.err


@pytest.mark.slow  # builds the interposer with the sanitizers: 8 s
def test_damaged_guarded_lines_run_the_originals_under_the_sanitizers(
        fake: FakeCuda, tmp_path: Path, sanitized: list[str]) -> None:  # noqa: F811
    """The seeded mutations of test_interposer_fuzz on a file of guarded entries, with the
    interposer built with AddressSanitizer and UndefinedBehaviorSanitizer: no finding, the
    program's own output (the global is only rewritten with its own value: a damaged line
    that lost its guard computes the same)."""
    own = loop_image_id(fake)
    text = (cheat_line(fake, tmp_path, guard_field(own), guard_field(own, BIAS, "bias"))
            + step_line(tuned_image(fake, tmp_path), 5) + f"\tattrs:0:{attr(4, 2)}\n").encode()
    script = G13 + "V" + G13 + "b" * 7 + "c"
    expected = subprocess.run(fake.guard_command(script), env=fake.env, capture_output=True,
                              text=True, check=True, timeout=TIMEOUT_S).stdout
    for seed in range(25):
        r = run(fake, Path(sanitized[-1]), fake.guard_command(script), tmp_path,
                mutated(seed, text), preload=sanitized,
                env={**SANITIZER_ENV, "FAKE_GUARD_ATTR": "0:4:2"})
        check(r, expected, seed)


# ---- the contract with kernforge's writer ---------------------------------------------------
@pytest.mark.parametrize("write", ["", "W"], ids=["unchanged", "written mid-run"])
def test_a_guarded_fused_entry_written_by_kernforge_runs_in_the_interposer(
        fake: FakeCuda, lib: Path, tmp_path: Path, write: str) -> None:
    """deploy/native.py's fused entry of cheat with guard_for(cheat_c), through read_spec and
    interposer_lines: it fuses while cheat_c holds the value it baked in, and no longer once
    the program writes another."""
    import numpy as np

    from kernforge.core.native import NativeParam, NativeRecording, NativeRegion
    from kernforge.deploy import native as nd
    from kernforge.deploy.native_guards import guard_for

    loaded = f"KFFAKE {fake.kernels}".encode() + b"\0"  # the image as fake_guard loads it
    raw = bytes(16) + (1000).to_bytes(4, "little")
    rec = NativeRecording(tmp_path / "unit", "cheat", "cheat", "img-fake-guard", "text",
                          (8, 1, 1), (128, 1, 1), 0,
                          (NativeParam(0, 8, ((0, 0),)), NativeParam(8, 8, ((8, 1),)),
                           NativeParam(16, 4)), raw,
                          (NativeRegion(0x7000, 8000, "alloc", "a", None),
                           NativeRegion(0x9000, 8000, "alloc", "b", None)),
                          identity={"device": "fake"},
                          loader=lambda blob: np.frombuffer(loaded, dtype=np.uint8))
    image = f"KFFAKE {fake.tuned}\n".encode()
    e = nd.fused_entry(rec, image="fused.img", image_bytes=image, entry_name="cheat_x5",
                       grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0, steps=5, in_offset=0,
                       out_offset=8, evidence={},
                       guards=[guard_for("cheat_c", BAKED, nd.recorded_image_id(rec))])
    spec = nd.read_spec(nd.write_spec(tmp_path / "spec.json", [e], {"fused.img": image}))
    r, expected = guarded(fake, lib, tmp_path, G13 + write + G13 + "c",
                          nd.interposer_lines(spec))
    assert r.rc == 0 and r.out == expected, r.err
    assert fused_groups(r) == (2 if write else 5) and len(r.messages) == (1 if write else 0)


# ---- which driver functions write where -------------------------------------------------------
KINDS = {  # name, looked up by symbol (dlsym) or not (cuGetProcAddress's base name): kind
    ("cuMemcpyHtoD_v2", 1): "RDX", ("cuMemcpyHtoD", 0): "RDX", ("cuMemcpyHtoD", 1): "ANY",
    ("cuMemcpyHtoDAsync_v2_ptsz", 1): "RDX", ("cuMemcpyDtoD_v2_ptds", 1): "RDX",
    ("cuMemcpy", 1): "RDX", ("cuMemcpyAsync_ptsz", 1): "RDX", ("cuMemcpyPeer", 1): "R8",
    ("cuMemcpyAtoD_v2", 1): "RCX", ("cuMemsetD8_v2", 1): "SET8", ("cuMemsetD16", 0): "SET16",
    ("cuMemsetD32Async", 1): "SET32", ("cuMemsetD2D8_v2", 1): "SET2D8",
    ("cuMemsetD2D32Async_ptsz", 1): "SET2D32", ("cuMemsetD8", 1): "ANY",
    ("cuMemcpyDtoH_v2", 1): "NONE", ("cuMemcpyHtoAAsync_v2", 1): "NONE",
    ("cuMemcpy2D_v2", 1): "ANY", ("cuMemcpy3DPeerAsync", 0): "ANY",
    ("cuMemcpyBatchAsync_v2", 1): "ANY", ("cuStreamWriteValue32_v2", 1): "ANY",
    ("cuStreamBatchMemOp", 0): "ANY", ("cuStreamSynchronize", 1): "NONE",
    ("cuEventRecord", 0): "NONE", ("cuMemcpy" + "x" * 80, 1): "ANY",
}
NAMES = ["NONE", "RDX", "RCX", "R8", "SET8", "SET16", "SET32", "SET2D8", "SET2D16", "SET2D32",
         "ANY"]  # kf.h KF_WRITES_*, in order


def test_copies_and_memsets_are_known_by_the_registers_of_what_they_write(lib: Path) -> None:
    """kf_writes_kind: the destination and size registers of each copy and memset, by name;
    a 32-bit (_v1) symbol, a 2D/3D/batched copy or a stream memory operation: anything."""
    code = ("import ctypes, sys, json; f = ctypes.CDLL(sys.argv[1]).kf_writes_kind; "
            "print(json.dumps([f(n.encode(), e) for n, e in json.loads(sys.argv[2])]))")
    names = list(KINDS)
    out = subprocess.run([sys.executable, "-c", code, str(lib), json.dumps(names)],
                         capture_output=True, text=True, check=True, timeout=TIMEOUT_S).stdout
    got = {k: NAMES[v] for k, v in zip(names, json.loads(out), strict=True)}
    assert got == KINDS
