"""Held launches that a flush runs unfused, under a fused entry that names its one-launch
replacement ("unfused:next": the next line's entry, record/native/kf_unfused.c), run for real
on the fake CUDA driver: the held stencils run that replacement (heat_one, told apart from heat
by the fake driver's FAKE_CUDA_TRACE) wherever it would replace the launch on its own, and the
original launches wherever fusion was refused or the replacement cannot run."""

from __future__ import annotations

import random
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from deploy_run import (
    GEOMETRY,
    TIMEOUT_S,
    Run,
    companion_fields,
    fused_groups,
    fused_line,
    heat_key,
    line,
    loop_image_id,
    run,
    step_line,
    tuned_image,
    with_geometry,
)
from test_interposer_defer_stress import FINDINGS, program, sanitized  # noqa: F401

from kernforge.testing.fakedriver import FakeCuda

TAG = "\tunfused:next"


def one_line(image: Path | str, *, entry: str = "heat_one", key: str | None = None,
             grid: str = "8,1,1", new_block: str = "128,1,1", source: str = "-") -> str:
    """A one-launch entry for heat: ``entry`` of ``image`` with 8 blocks of ``new_block``."""
    return line("heat", image, key=heat_key() if key is None else key, entry=entry,
                grid=grid, new_grid="8,1,1", new_block=new_block, source=source)


def pair(image: Path | str, steps: int = 5, one: dict[str, str] | None = None) -> str:
    """A fused heat entry that names the one-launch entry of the next line, and that entry
    (``one``: :func:`one_line`'s arguments)."""
    return fused_line(image, steps) + TAG + "\n" + one_line(image, **(one or {})) + "\n"


def traced(fake: FakeCuda, lib: Path, tmp: Path, script: str, lines: str,
           env: dict[str, str] | None = None) -> tuple[Run, str, Counter[str]]:
    """``script`` of fake_loop under ``lines``: the run, the plain program's output, and how
    many times each kernel ran under the interposer."""
    cmd = fake.loop_command(script)
    alone = subprocess.run(cmd, env={**fake.env, **(env or {})}, capture_output=True,
                           text=True, check=True, timeout=TIMEOUT_S)
    trace = tmp / "trace.txt"
    trace.unlink(missing_ok=True)
    r = run(fake, lib, cmd, tmp, lines, env={**(env or {}), "FAKE_CUDA_TRACE": str(trace)})
    ran = Counter(trace.read_text().split()) if trace.is_file() else Counter()
    return r, alone.stdout, ran


def one_entry(r: Run) -> dict[str, int]:
    assert r.log and len(r.log["entries"]) == 2, r.log
    return dict(r.log["entries"][1])


# steps, T -> fused launches, held launches run unfused
CASES = {"the remainder of a partial chain (20 steps, T=3)": ("s" * 20, 3, 6, 2),
         "a chain too short to fuse": ("sss", 5, 0, 3),
         "the step held after a fused launch": ("s" * 6, 5, 1, 1),
         "13 steps, T=5": ("s" * 13, 5, 2, 3)}


@pytest.mark.parametrize(("steps", "t", "groups", "held"), list(CASES.values()), ids=list(CASES))
def test_held_stencils_run_unfused_run_the_one_launch_replacement(
        fake: FakeCuda, lib: Path, tmp_path: Path, steps: str, t: int, groups: int,
        held: int) -> None:
    image = tuned_image(fake, tmp_path)
    r, expected, ran = traced(fake, lib, tmp_path, steps + "c", pair(image, t))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran == Counter({f"heat_x{t}": groups, "heat_one": held} if groups else
                          {"heat_one": held}), ran
    assert fused_groups(r) == groups and r.log
    assert r.log["flushed_unfused"] == held and r.log["flushed_one_launch"] == held, r.log
    assert r.log["entries"][0]["flushed_one_launch"] == held and one_entry(r)["replaced"] == held


def test_every_flush_point_runs_the_replacement(fake: FakeCuda, lib: Path,
                                                tmp_path: Path) -> None:
    """Copies, syncs, an event, another kernel: each flushes what is held through heat_one."""
    image = tuned_image(fake, tmp_path)
    script = "s" * 13 + "c" + "s" * 7 + "y" + "s" * 2 + "k" + "s" * 9 + "e" + "s" * 4
    r, expected, ran = traced(fake, lib, tmp_path, script, pair(image))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran["heat"] == 0 and ran["heat_x5"] == fused_groups(r) == 4, ran
    assert r.log and ran["heat_one"] == 35 - 4 * 5 == r.log["flushed_one_launch"], ran


@pytest.mark.parametrize("end", ["x", "X"], ids=["exit", "cuCtxDestroy"])
def test_steps_held_at_exit_or_context_teardown_run_the_replacement(
        fake: FakeCuda, lib: Path, tmp_path: Path, end: str) -> None:
    """The loop's buffers are a shared file mapping: what the kernels left there outlives the
    process, and equals the plain run's."""
    maps = {m: tmp_path / f"{m}.bin" for m in ("plain", "fused")}
    cmd = fake.loop_command("s" * 13 + end)
    subprocess.run(cmd, env={**fake.env, "FAKE_LOOP_MAP": str(maps["plain"])}, check=True,
                   capture_output=True, timeout=TIMEOUT_S)
    r, _, ran = traced(fake, lib, tmp_path, "s" * 13 + end, pair(tuned_image(fake, tmp_path)),
                       env={"FAKE_LOOP_MAP": str(maps["fused"])})
    assert r.rc == 0 and not r.messages, r.err
    assert ran == Counter({"heat_x5": 2, "heat_one": 3}), ran
    assert maps["fused"].read_bytes() == maps["plain"].read_bytes()


def test_without_unfused_next_the_originals_run_as_before(fake: FakeCuda, lib: Path,
                                                          tmp_path: Path) -> None:
    """A file written before the field: the same two lines, the fused one untagged."""
    image = tuned_image(fake, tmp_path)
    lines = fused_line(image, 5) + "\n" + one_line(image) + "\n"
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran == Counter({"heat_x5": 2, "heat": 3}) and r.log, ran
    assert r.log["flushed_one_launch"] == 0 and one_entry(r)["replaced"] == 0


def test_with_fusion_off_the_one_launch_line_replaces_every_launch(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    lines = pair(tuned_image(fake, tmp_path))
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", lines,
                              env={"KERNFORGE_FUSE": "0"})
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran == Counter({"heat_one": 13}) and fused_groups(r) == 0, ran
    assert one_entry(r)["replaced"] == 13


# ---- where the replacement does not apply, or fails ----------------------------------------------
NOT_THIS_LAUNCH = {"another key (n)": {"key": heat_key(n=999)},
                   "another grid": {"grid": "4,1,1"},
                   "another source image": {"source": "1" * 16}}


@pytest.mark.parametrize("one", list(NOT_THIS_LAUNCH.values()), ids=list(NOT_THIS_LAUNCH))
def test_a_replacement_that_would_not_replace_the_launch_leaves_the_original(
        fake: FakeCuda, lib: Path, tmp_path: Path, one: dict[str, str]) -> None:
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c",
                              pair(tuned_image(fake, tmp_path), one=one))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran == Counter({"heat_x5": 2, "heat": 3}), ran


@pytest.mark.parametrize("damage", ["missing image", "no such function", "launch refused"])
def test_a_failing_replacement_runs_the_original_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, damage: str) -> None:
    """The first flush finds it failing: the original runs instead, once per held launch, and
    every later flush runs the originals; fusion goes on."""
    image = tuned_image(fake, tmp_path)
    one = {"missing image": {"entry": "heat_one"}, "no such function": {"entry": "heat_y"},
           "launch refused": {"new_block": "2048,1,1"}}[damage]
    lines = fused_line(image, 5) + TAG + "\n" + one_line(
        tmp_path / "gone.bin" if damage == "missing image" else image, **one) + "\n"
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c" + "s" * 13 + "c", lines)
    assert r.rc == 0 and r.out == expected, r.err
    assert len(r.messages) == 1 and "runs unchanged" in r.messages[0], r.err
    assert ran == Counter({"heat_x5": 4, "heat": 6}), ran
    assert r.log and r.log["flushed_one_launch"] == 0 and r.log["flushed_unfused"] == 6


@pytest.mark.parametrize("damage", ["garbage", "launch refused"])
def test_a_failing_fused_entry_runs_the_originals_not_the_replacement(
        fake: FakeCuda, lib: Path, tmp_path: Path, damage: str) -> None:
    """Fusion refused (its image does not load, its fused launch fails): what is held and
    every later launch of heat run as the originals, the one-launch line's included."""
    image = tuned_image(fake, tmp_path)
    fused = tmp_path / "fused.bin"
    if damage == "garbage":
        fused.write_bytes(b"\x7fELF not an image\n")
        head = fused_line(fused, 5)
    else:
        head = fused_line(image, 5).replace("\t1,1,1\t1,1,1\t", "\t1,1,1\t2048,1,1\t")
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c" + "s" * 13 + "c",
                              head + TAG + "\n" + one_line(image) + "\n")
    assert r.rc == 0 and r.out == expected, r.err
    assert len(r.messages) == 1 and "unfused" in r.messages[0], r.err
    assert ran == Counter({"heat": 26}), ran
    assert one_entry(r)["replaced"] == 0


def guard(fake: FakeCuda) -> str:
    """fake_guard's cheat_c as cheat_x5 bakes it (0.25), in fake_loop's module image."""
    import struct

    from kernforge.deploy.native import image_id

    value = struct.pack("<d", 0.25)
    return f"guard:{loop_image_id(fake)}:8:{image_id(value)}:cheat_c"


def cheat_pair(fake: FakeCuda, tmp: Path) -> str:
    """cheat fused (cheat_x5, guarded) naming the tuned cheat (its coefficient baked in, not
    guarded: a replacement that would be wrong once the global changes) on the next line."""
    key = "xx" * 16 + (1000).to_bytes(4, "little").hex()
    image = tuned_image(fake, tmp)
    fused = line("cheat", image, key=key, entry="cheat_x5", new_grid="1,1,1", new_block="1,1,1")
    one = line("cheat", image, key=key, new_grid="8,1,1", new_block="128,1,1")
    return f"{fused}\tfuse:5:0:8\t{guard(fake)}{TAG}\n{one}\n"


def test_a_guard_refusal_runs_the_originals_and_turns_the_replacement_off(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """The global is written before the loop: the fused entry's guard refuses it at the first
    fused launch; the held steps and every later step run as the program's cheat (the
    unguarded replacement, with the old value baked in, would change the output)."""
    cmd = fake.guard_command("W" + "g" * 26 + "c")
    alone = subprocess.run(cmd, env=fake.env, capture_output=True, text=True, check=True,
                           timeout=TIMEOUT_S)
    r = run(fake, lib, cmd, tmp_path, cheat_pair(fake, tmp_path))
    assert r.rc == 0 and r.out == alone.stdout, r.err
    assert fused_groups(r) == 0 and r.replaced == 0, r.log
    assert len(r.messages) == 1 and "cheat_c" in r.messages[0], r.err


def test_steps_flushed_before_the_global_changes_run_the_replacement(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """13 steps (two fused launches, three held), then the write flushes them: they run the
    replacement with the value it baked in; after it the originals run."""
    cmd = fake.guard_command("g" * 13 + "W" + "g" * 26 + "c")
    alone = subprocess.run(cmd, env=fake.env, capture_output=True, text=True, check=True,
                           timeout=TIMEOUT_S)
    r = run(fake, lib, cmd, tmp_path, cheat_pair(fake, tmp_path))
    assert r.rc == 0 and r.out == alone.stdout, r.err
    assert fused_groups(r) == 2 and r.replaced == 3 and r.log, r.log
    assert r.log["flushed_one_launch"] == 3


# ---- the line format ----------------------------------------------------------------------------
@pytest.mark.parametrize("tag", ["unfused:prev", "unfused:", "unfused:next\tunfused:next",
                                 "unfused:next "])
def test_a_malformed_unfused_field_skips_its_line_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, tag: str) -> None:
    image = tuned_image(fake, tmp_path)
    lines = fused_line(image, 5) + "\t" + tag + "\n"
    r, expected, _ = traced(fake, lib, tmp_path, "s" * 13 + "c", lines)
    assert r.rc == 0 and r.out == expected and fused_groups(r) == 0, r.log
    assert len(r.messages) == 1 and "malformed" in r.messages[0], r.err


def test_unfused_next_on_a_one_launch_line_skips_it(fake: FakeCuda, lib: Path,
                                                    tmp_path: Path) -> None:
    lines = one_line(tuned_image(fake, tmp_path)) + "\t-" + TAG + "\n"
    r, expected, _ = traced(fake, lib, tmp_path, "s" * 5 + "c", lines)
    assert r.rc == 0 and r.out == expected and r.replaced == 0 and "malformed" in r.err, r.err


NO_NEXT = {"the last line": "{f}\n", "a comment between": "{f}\n# note\n{o}\n",
           "another kernel next": "{f}\n{x}\n{o}\n", "a fused line next": "{f}\n{f}\n",
           "a malformed line next": "{f}\n{o}\tfuse:4:0:8\n"}


@pytest.mark.parametrize("text", list(NO_NEXT.values()), ids=list(NO_NEXT))
def test_without_a_one_launch_entry_on_the_next_line_the_originals_run_told_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, text: str) -> None:
    image = tuned_image(fake, tmp_path)
    lines = text.format(f=fused_line(image, 5) + TAG, o=one_line(image),
                        x=line("offset", image, key="*"))
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", lines)
    assert r.rc == 0 and r.out == expected, r.err
    assert ran["heat_one"] == 0 and ran["heat_x5"] == 2, ran
    told = [m for m in r.messages if "unfused:next" in m]
    assert len(told) == 1 and "line 1" in told[0], r.err


# ---- random flush points ------------------------------------------------------------------------
def stress(fake: FakeCuda, preload: list[str], tmp: Path, seed: int, multi: bool = False,
           extra: dict[str, str] | None = None) -> tuple[int, int]:
    """test_interposer_defer_stress's random program ``seed`` under a fused entry that names a
    one-launch replacement (``multi``: of interior, whose companions run as themselves): every
    observation and the mapped buffers as the plain run's; (fused launches, held launches the
    replacement ran)."""
    script, steps, direct, at_exit = program(random.Random(seed), multi)
    cmd = fake.loop_command(script, direct=direct)
    env = {"FAKE_LOOP_MAP": str(tmp / "alone.bin"), "FAKE_LOOP_ATEXIT": "1" if at_exit else "0"}
    alone = subprocess.run(cmd, env={**fake.env, **env}, capture_output=True, text=True,
                           timeout=TIMEOUT_S, check=False)
    assert alone.returncode == 0, (seed, alone.stderr)
    env["FAKE_LOOP_MAP"] = str(tmp / "fused.bin")
    image = tuned_image(fake, tmp)
    if multi:
        lines = (step_line(image, steps, companions=with_geometry(companion_fields(), GEOMETRY))
                 + TAG + "\n" + line("interior", image, key=heat_key(), new_block="128,1,1")
                 + "\n")
    else:
        lines = pair(image, steps)
    got = run(fake, Path(preload[-1]), cmd, tmp, lines, env={**env, **(extra or {})},
              preload=preload)
    assert got.rc == 0 and not got.messages, (seed, script, got.err[-3000:])
    assert not any(f in got.err for f in FINDINGS), (seed, got.err[-3000:])
    assert got.out == alone.stdout, (seed, script, steps, direct)
    assert (tmp / "fused.bin").read_bytes() == (tmp / "alone.bin").read_bytes(), (seed, script)
    log = got.log or {}
    return int(log.get("fused_groups", 0)), int(log.get("flushed_one_launch", 0))


@pytest.mark.parametrize("multi", [False, True], ids=["heat", "steps of several launches"])
def test_random_flush_points_with_the_replacement_leave_every_buffer_as_the_unfused_run(
        fake: FakeCuda, lib: Path, tmp_path: Path, multi: bool) -> None:
    counts = [stress(fake, [str(lib)], tmp_path, seed, multi) for seed in range(30)]
    assert sum(g for g, _ in counts) > 30 and sum(o for _, o in counts) > 30, counts


@pytest.mark.slow  # the sanitizer build takes several seconds
def test_the_sanitizer_build_finds_nothing_with_the_replacement(
        fake: FakeCuda, sanitized: list[str], tmp_path: Path) -> None:  # noqa: F811
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}
    for seed in range(3000, 3030):
        stress(fake, sanitized, tmp_path, seed, extra=env)
        stress(fake, sanitized, tmp_path, seed, multi=True, extra=env)
