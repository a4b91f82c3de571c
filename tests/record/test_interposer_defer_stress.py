"""A seeded stress test of deferral (temporal fusion) on the fake CUDA driver: hundreds of
random time-loop programs interleave heat steps on two streams and the NULL stream with random
flush points (every kind fake_loop.c knows), under random step counts T and both ways of
reaching the driver; every observation of every buffer must equal the unfused run's, forks and
exits from a signal handler among them. The same with steps of several launches (interior and
its companions, whole, in parts, with other scalars, geometry or IN and OUT, on other streams
or threads, in another order, captured into graphs) under a fused entry that lists the
companions with their geometry. A
part runs again with the interposer built with AddressSanitizer and UndefinedBehaviorSanitizer
(``slow``: the sanitizer build takes several seconds)."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import pytest
from deploy_run import (
    GEOMETRY,
    TIMEOUT_S,
    companion_fields,
    fused_line,
    run,
    step_line,
    tuned_image,
    with_geometry,
)

from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda

STEPS = "s" * 12 + "t" * 3 + "d"  # weights: mostly chain 0, some chain 1 and the NULL stream
WRITES = "kKM"  # other kernels, a copy into the loop's buffer
OBSERVE = "cCypqeEwhmfguPzGZF"  # F: a fork whose child exits through its exit handlers
ENDS = ["", "", "x", "X", "R", "D", "A"]  # A: exit() from a signal handler
# steps of several launches: mostly whole steps of chain 0, some of chain 1, the NULL stream,
# a step in two parts; breaks: a part of a step, other scalars, companions on another stream or
# in another order, a one-launch heat step, a mix with IN and OUT swapped or of 2 blocks, an
# interior of a block fewer; companions from another thread, steps captured into a graph, a
# buffer freed and allocated again
MULTI = "b" * 10 + "B" * 2 + "a" + "ij"
MULTI_WRITES = "kKMijvorsSIJTHU"
SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined")
FINDINGS = ("ERROR: AddressSanitizer", "runtime error:")


def program(r: random.Random, multi: bool = False) -> tuple[str, int, bool, bool]:
    """A script, T, whether it binds by symbol, whether an exit handler copies the buffers."""
    ops = []
    steps, writes = (MULTI, MULTI_WRITES) if multi else (STEPS, WRITES)
    for _ in range(r.randrange(10, 120)):
        x = r.random()
        ops.append(r.choice(steps) * r.randrange(1, 12) if x < 0.7 else
                   r.choice(writes) if x < 0.8 else r.choice(OBSERVE))
    return "".join(ops) + r.choice(ENDS), r.choice([3, 5, 7]), r.random() < 0.5, \
        r.random() < 0.3


def check(fake: FakeCuda, preload: list[str], tmp: Path, seed: int,
          extra: dict[str, str] | None = None, multi: bool = False) -> int:
    """One random program, fused and alone; returns its fused groups (``multi``: of steps of
    several launches)."""
    r = random.Random(seed)
    script, steps, direct, at_exit = program(r, multi)
    cmd = fake.loop_command(script, direct=direct)
    env = {"FAKE_LOOP_MAP": str(tmp / "alone.bin"), "FAKE_LOOP_ATEXIT": "1" if at_exit else "0"}
    alone = subprocess.run(cmd, env={**fake.env, **env}, capture_output=True, text=True,
                           timeout=TIMEOUT_S, check=False)
    assert alone.returncode == 0, (seed, alone.stderr)
    env["FAKE_LOOP_MAP"] = str(tmp / "fused.bin")
    image = tuned_image(fake, tmp)
    lines = (step_line(image, steps, companions=with_geometry(companion_fields(), GEOMETRY))
             if multi else fused_line(image, steps)) + "\n"
    got = run(fake, Path(preload[-1]), cmd, tmp, lines, env={**env, **(extra or {})},
              preload=preload)
    assert got.rc == 0 and not got.messages, (seed, script, got.err[-3000:])
    assert got.out == alone.stdout, (seed, script, steps, direct)
    assert (tmp / "fused.bin").read_bytes() == (tmp / "alone.bin").read_bytes(), (seed, script)
    return int((got.log or {}).get("fused_groups", 0))


@pytest.mark.slow
def test_random_flush_points_leave_every_buffer_as_the_unfused_run(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    groups = sum(check(fake, [str(lib)], tmp_path, seed) for seed in range(300))
    assert groups > 300  # fusion happened, not only flushes


def test_random_flush_points_in_steps_of_several_launches(fake: FakeCuda, lib: Path,
                                                         tmp_path: Path) -> None:
    groups = sum(check(fake, [str(lib)], tmp_path, seed, multi=True) for seed in range(20))
    assert groups > 20


@pytest.mark.slow
def test_many_random_flush_points_in_steps_of_several_launches(fake: FakeCuda, lib: Path,
                                                              tmp_path: Path) -> None:
    groups = sum(check(fake, [str(lib)], tmp_path, seed, multi=True)
                 for seed in range(20, 320))
    assert groups > 300


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """LD_PRELOAD for the sanitizer build: the ASan runtime first, then the interposer."""
    cc = interposer.compiler()
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=False).stdout.strip()
    if not os.path.isabs(asan) or not Path(asan).exists():
        pytest.skip(f"{cc} has no AddressSanitizer runtime")
    return [asan, str(interposer.build(tmp_path_factory.mktemp("asan"), extra_flags=SANITIZE))]


@pytest.mark.slow  # the sanitizer build alone takes several seconds
def test_the_sanitizer_build_finds_nothing_under_random_flush_points(
        fake: FakeCuda, sanitized: list[str], tmp_path: Path) -> None:
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}
    for seed in range(1000, 1040):
        check(fake, sanitized, tmp_path, seed, env)
    for seed in range(2000, 2040):
        check(fake, sanitized, tmp_path, seed, env, multi=True)


@pytest.mark.slow
def test_the_sanitizer_build_finds_nothing_with_32_threads(
        fake: FakeCuda, sanitized: list[str], tmp_path: Path) -> None:
    cmd = fake.threads_command(32, 41, streams=True)
    alone = subprocess.run(cmd, env=fake.env, capture_output=True, text=True, check=True,
                           timeout=TIMEOUT_S).stdout
    lines = fused_line(tuned_image(fake, tmp_path), 5) + "\n"
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}
    got = run(fake, Path(sanitized[-1]), cmd, tmp_path, lines, env=env, preload=sanitized)
    assert got.rc == 0 and got.out == alone, got.err[-3000:]
    assert not any(f in got.err for f in FINDINGS)
