"""Deferral of a step whose companion is a per-step diagnostic, run for real on the fake CUDA
driver: fake_loop.c's step "l" launches heat, then sqdiff(in, out, n, e), which writes
sum((out - in)^2) into a third buffer. A fused entry for heat (heat_x5 writes only the grids)
lists sqdiff as its companion, its pointer to e matched as recorded (FAKE_CUDA_ARENA puts e at
the same address in every run); the held step after each fused launch re-runs sqdiff as the
original, so every buffer, e included, equals the unfused run's at every observation point. A
diagnostic that accumulates (sqacc, step "L") is exactly what must not be elided: the same
deployment then leaves another e."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from deploy_run import Run, fused_groups, fused_line, run, tuned_image

from kernforge.testing.fakedriver import FakeCuda

N = 1000
ARENA = 0x3A0000000000
E = ARENA + 4 * ((N * 8 + 511) // 512 * 512)  # the fifth buffer fake_loop allocates


def _deployed(fake: FakeCuda, lib: Path, tmp: Path, script: str, kernel: str = "sqdiff",
              arena: int | None = ARENA, same: bool = False) -> tuple[Run, str]:
    """``script`` deployed (with e where ``arena`` puts it; None: where the run puts it), and
    the unfused run's output. ``same``: the pointer to e as "xx" (as in the first held step)."""
    env = {"FAKE_CUDA_ARENA": hex(ARENA)}
    params = (bytes(16) + struct.pack("<i4xQ", N, E)).hex()  # in, out, n, e
    if same:
        params = params[:48] + "x" * 16
    line = fused_line(tuned_image(fake, tmp), 5, fuse="fuse:5:0:8:1") + \
        f"\t{kernel}\t{params}\t0\t8\n"
    cmd = fake.loop_command(script, n=N)
    plain = run(fake, lib, cmd, tmp, "", env={**env, "KERNFORGE_FUSE": "0"})
    where = {"FAKE_CUDA_ARENA": hex(arena)} if arena is not None else {}
    return run(fake, lib, cmd, tmp, line, env=where), plain.out


@pytest.mark.parametrize("script", ["l" * 13 + "c", "l" * 8 + "y" + "l" * 7 + "e" + "l" * 3])
def test_an_elided_diagnostic_equals_the_unfused_run(fake: FakeCuda, lib: Path,
                                                      tmp_path: Path, script: str) -> None:
    r, expected = _deployed(fake, lib, tmp_path, script)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected and "obs" in expected
    assert fused_groups(r) >= 2, r.log


def test_an_accumulating_diagnostic_would_differ(fake: FakeCuda, lib: Path,
                                                 tmp_path: Path) -> None:
    r, expected = _deployed(fake, lib, tmp_path, "L" * 13 + "c", kernel="sqacc")
    assert r.rc == 0 and fused_groups(r) == 2, (r.err, r.log)
    assert r.out != expected  # the fused launches dropped 8 of its 13 additions


def test_a_diagnostic_buffer_elsewhere_runs_unfused(fake: FakeCuda, lib: Path,
                                                    tmp_path: Path) -> None:
    """The companion's pointer to e is matched as recorded: where the run allocates e
    elsewhere, no step matches and every launch runs as the original (same output)."""
    r, expected = _deployed(fake, lib, tmp_path, "l" * 13 + "c", arena=None)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0, r.log


def test_a_diagnostic_buffer_elsewhere_fuses_with_same_slots(fake: FakeCuda, lib: Path,
                                                             tmp_path: Path) -> None:
    """With the pointer to e as "xx" (deploy/native.py ``same_slots``), a run that put e
    elsewhere fuses all the same, and every buffer, e included, equals the unfused run's."""
    r, expected = _deployed(fake, lib, tmp_path, "l" * 13 + "c", arena=None, same=True)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected and fused_groups(r) >= 2, r.log


def test_same_slots_still_refuse_an_accumulating_diagnostic_of_course(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """"xx" frees the address, not the semantics: the accumulating one still differs, which is
    why the operator side refuses to elide it (apps/elide_companion.py)."""
    r, expected = _deployed(fake, lib, tmp_path, "L" * 13 + "c", kernel="sqacc", same=True)
    assert r.rc == 0 and fused_groups(r) == 2 and r.out != expected, (r.err, r.log)


@pytest.mark.parametrize(("script", "groups"), [
    ("l" * 7 + "Q" + "l" * 7 + "c", 2), ("l" * 7 + "Q" * 7 + "l" * 7 + "c", 3),
    ("lQ" * 9 + "c", 0), ("l" * 6 + "iQ" + "l" * 6 + "c", 1)],
    ids=["one step", "seven steps", "every other step", "after another kernel"])
def test_a_diagnostic_buffer_that_moves_mid_run_flushes(fake: FakeCuda, lib: Path,
                                                        tmp_path: Path, script: str,
                                                        groups: int) -> None:
    """With "xx", the pointer to e must be the first held step's: step "Q" writes its
    diagnostic into another buffer, so what is held runs first, and steps "Q" chain among
    themselves; every buffer equals the unfused run's."""
    r, expected = _deployed(fake, lib, tmp_path, script, arena=None, same=True)
    assert r.rc == 0 and not r.messages, r.err
    assert r.out == expected and fused_groups(r) == groups, r.log
