"""A seeded fuzz of the interposer's deploy line file and its deploy-side environment, each
case run for real under the fake CUDA driver: no crash, no hang, the program's own output (a
damaged entry runs the original kernel), each problem told once. A part runs again with the
interposer built with AddressSanitizer and UndefinedBehaviorSanitizer: no finding."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from deploy_run import Run, heat_key, line, plain, run, tuned_image

from kernforge.record import interposer
from kernforge.testing.fakedriver import FakeCuda

SANITIZE = ("-fsanitize=address,undefined", "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined")
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
                 "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """LD_PRELOAD for the sanitizer build: the ASan runtime first, then the interposer."""
    cc = interposer.compiler()
    asan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=False).stdout.strip()
    if not os.path.isabs(asan) or not Path(asan).exists():
        pytest.skip(f"{cc} has no AddressSanitizer runtime")
    return [asan, str(interposer.build(tmp_path_factory.mktemp("asan"), extra_flags=SANITIZE))]


def base_lines(fake: FakeCuda, tmp: Path) -> list[str]:
    image = tuned_image(fake, tmp)
    return ["# written by kernforge", line("heat", image, key=heat_key(), jit="0=64,7=3",
                                             source="-"),
            line("scale", image, key="xx" * 8 + "e803000000000000" + "000000000000e03f",
                 new_block="128,1,1", carveout="25")]


# ---- mutations ---------------------------------------------------------------------------------
HUGE = [str(2**32), str(2**64), str(2**64 + 1), "-1", "99999999999999999999999999", "1e3",
        " 5", "+5", "0x10", "", "-", "*", "\x00", "\r"]


def _truncate(r: random.Random, text: bytes) -> bytes:
    return text[:r.randrange(len(text) + 1)]


def _flip(r: random.Random, text: bytes) -> bytes:
    b = bytearray(text)
    for _ in range(r.randint(1, 4) if b else 0):
        b[r.randrange(len(b))] = r.randrange(256)
    return bytes(b)


def _insert(r: random.Random, text: bytes) -> bytes:
    at = r.randrange(len(text) + 1)
    return text[:at] + bytes(r.randrange(256) for _ in range(r.randint(1, 64))) + text[at:]


def _fields(r: random.Random, text: bytes, change: Callable[[list[bytes]], None]) -> bytes:
    lines = text.split(b"\n")
    i = r.randrange(len(lines))  # an entry, mostly
    fields = lines[i].split(b"\t")
    change(fields)
    lines[i] = b"\t".join(fields)
    return b"\n".join(lines)


def _huge_number(r: random.Random, text: bytes) -> bytes:
    def change(f: list[bytes]) -> None:
        f[r.randrange(len(f))] = r.choice(HUGE).encode()
    return _fields(r, text, change)


def _long_field(r: random.Random, text: bytes) -> bytes:
    def change(f: list[bytes]) -> None:
        k = r.randrange(len(f))
        f[k] = f[k] * r.choice([2, 100, 10_000]) if f[k] else b"9" * 100_000
    return _fields(r, text, change)


def _tabs(r: random.Random, text: bytes) -> bytes:
    def change(f: list[bytes]) -> None:
        if r.random() < 0.5 and len(f) > 1:
            k = r.randrange(len(f) - 1)
            f[k:k + 2] = [f[k] + f[k + 1]]  # a tab missing
        else:
            f.insert(r.randrange(len(f) + 1), r.choice([b"", b"0", b"heat"]))  # one more
    return _fields(r, text, change)


def _swap(r: random.Random, text: bytes) -> bytes:
    def change(f: list[bytes]) -> None:
        a, b = r.randrange(len(f)), r.randrange(len(f))
        f[a], f[b] = f[b], f[a]
    return _fields(r, text, change)


def _garbage(r: random.Random, text: bytes) -> bytes:
    return text + bytes(r.randrange(256) for _ in range(r.randint(1, 20_000)))


def _repeat(r: random.Random, text: bytes) -> bytes:
    lines = text.split(b"\n")
    return b"\n".join(lines + [lines[r.randrange(len(lines))]] * r.randint(2, 500))


def _line_ends(r: random.Random, text: bytes) -> bytes:
    return text.replace(b"\n", r.choice([b"\r\n", b"\r", b"\n\n", b"\x00\n"]))


def _long_comment(r: random.Random, text: bytes) -> bytes:
    return b"#" + b"c" * r.choice([8190, 8191, 65_536]) + text


MUTATIONS = [_truncate, _flip, _insert, _huge_number, _long_field, _tabs, _swap, _garbage,
             _repeat, _line_ends, _long_comment]


def mutated(seed: int, text: bytes) -> bytes:
    r = random.Random(seed)
    for _ in range(r.choice([1, 1, 1, 2, 3])):
        text = r.choice(MUTATIONS)(r, text)
    return text


def check(r: Run, expected: str, what: object) -> None:
    assert r.rc == 0, (what, r.rc, r.err[-2000:])
    assert r.out == expected, (what, r.err[-2000:])
    assert "Sanitizer" not in r.err and "runtime error" not in r.err, (what, r.err[-4000:])
    assert r.told_once(most=3), (what, r.messages)  # one per problem, never per launch


def fuzz_lines(fake: FakeCuda, tmp: Path, seeds: range, preload: list[str] | None = None,
               lib: Path | None = None) -> None:
    text = ("\n".join(base_lines(fake, tmp)) + "\n").encode()
    expected = plain(fake, fake.command())
    base = run(fake, lib or Path(), fake.command(), tmp, text, preload=preload,
               env=SANITIZER_ENV)
    check(base, expected, "base")
    assert base.replaced == 11 and not base.messages  # the undamaged file deploys both
    for seed in seeds:
        check(run(fake, lib or Path(), fake.command(), tmp, mutated(seed, text), preload=preload,
                  env=SANITIZER_ENV), expected, seed)


def test_a_damaged_line_file_runs_the_original_kernels(fake: FakeCuda, lib: Path,
                                                       tmp_path: Path) -> None:
    fuzz_lines(fake, tmp_path, range(40), lib=lib)


@pytest.mark.slow
def test_a_damaged_line_file_runs_the_original_kernels_in_500_cases(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    fuzz_lines(fake, tmp_path, range(1000, 1500), lib=lib)


# ---- the environment -----------------------------------------------------------------------------
def env_cases(fake: FakeCuda, tmp: Path) -> list[dict[str, str]]:
    fifo = tmp / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    garbage = tmp / "garbage.bin"
    garbage.write_bytes(random.Random(7).randbytes(100_000))
    spec = tmp / "spec.tsv"
    spec.write_text("\n".join(base_lines(fake, tmp)) + "\n")
    cases: list[dict[str, str]] = []
    for deploy in ["", str(tmp / "missing"), str(tmp), "/dev/zero", "/dev/null", str(fifo),
                   str(garbage), "relative/path", "\x01\x02", "x" * 5000]:
        cases.append({"KERNFORGE_DEPLOY": deploy})
    for log in ["", str(tmp), "/dev/null", str(fifo), str(tmp / "no" / "such" / "dir.json"),
                "/proc/version", "x" * 5000]:
        cases.append({"KERNFORGE_DEPLOY": str(spec), "KERNFORGE_DEPLOY_LOG": log})
    for libcuda in ["", str(tmp / "missing.so"), "/dev/zero", str(garbage), str(tmp),
                    "libc.so.6", "libm.so.6"]:
        cases.append({"KERNFORGE_DEPLOY": str(spec), "KERNFORGE_LIBCUDA": libcuda})
    for quiet in ["0", "1", "", "off", "\x7f"]:
        cases.append({"KERNFORGE_DEPLOY": str(garbage), "KERNFORGE_QUIET": quiet})
    return cases


def fuzz_env(fake: FakeCuda, tmp: Path, preload: list[str] | None = None,
             lib: Path | None = None) -> None:
    expected = plain(fake, fake.command())
    for case in env_cases(fake, tmp):
        env = {**SANITIZER_ENV, **case}
        r = run(fake, lib or Path(), fake.command(), tmp, None, env=env, preload=preload)
        check(r, expected, case)


def test_hostile_deploy_environment_variables_leave_the_program_alone(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    fuzz_env(fake, tmp_path, lib=lib)


# ---- under the sanitizers ----------------------------------------------------------------------
@pytest.mark.slow
def test_no_sanitizer_finding_in_threads_and_damaged_files(
        fake: FakeCuda, sanitized: list[str], tmp_path: Path) -> None:
    from test_interposer_deploy import check_threads

    (tmp_path / "threads").mkdir()
    check_threads(fake, Path(), tmp_path / "threads", runs=20, preload=sanitized,
                  env=SANITIZER_ENV)
    fuzz_lines(fake, tmp_path, range(2000, 2100), preload=sanitized)
    fuzz_env(fake, tmp_path, preload=sanitized)


@pytest.mark.slow
def test_the_sanitizer_build_is_cached_apart(tmp_path: Path) -> None:
    if shutil.which(interposer.compiler()) is None:
        pytest.skip("no C compiler")
    plain_lib = interposer.build(tmp_path)
    assert interposer.build(tmp_path, extra_flags=("-DKF_UNUSED_FLAG",)) != plain_lib
    assert interposer.build(tmp_path) == plain_lib
