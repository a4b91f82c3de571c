"""A context that ends (cuCtxDestroy, the primary context's reset or last release) and a new
one at the same handle, run for real on the fake CUDA driver with fake_ctx.c: the interposer
(record/native/kf_ctx.c) forgets what it kept of the old context, so a replacement, a fused
function and a guard's verification are loaded or read again in the new one, and a function
handle that now names another kernel is asked its name again. The fake driver gives the new
context the old one's handle, refuses to launch a function of an ended context
(CUDA_ERROR_INVALID_CONTEXT), and gives the new functions the old ones' handles, each another
kernel's (fake_ctx.c gets them in the reverse order)."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest
from deploy_run import (
    TIMEOUT_S,
    Run,
    fused_groups,
    fused_line,
    heat_key,
    line,
    loop_image_id,
    run,
    tuned_image,
)
from test_interposer_fuzz import SANITIZER_ENV, sanitized  # noqa: F401
from test_interposer_guard import cheat_line, guard_field

from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

FINDINGS = ("ERROR: AddressSanitizer", "runtime error:")
ENDS = {"cuCtxDestroy": "X", "primary reset": "D", "primary release": "R"}


def one_line(fake: FakeCuda, tmp: Path) -> str:
    """heat replaced by heat_one of the tuned image (FAKE_CUDA_TRACE tells the two apart)."""
    return line("heat", tuned_image(fake, tmp), key=heat_key(), entry="heat_one",
                new_block="128,1,1") + "\n"


def traced(fake: FakeCuda, lib: Path | None, tmp: Path, script: str, lines: str, *,
           direct: bool = False, preload: list[str] | None = None,
           env: dict[str, str] | None = None) -> tuple[Run, str, Counter[str]]:
    """``script`` of fake_ctx under ``lines``: the run, the plain program's output, and how
    many times each kernel ran under the interposer."""
    cmd = fake.ctx_command(script, direct=direct)
    alone = subprocess.run(cmd, env=fake.env, capture_output=True, text=True, check=True,
                           timeout=TIMEOUT_S)
    trace = tmp / "trace.txt"
    trace.unlink(missing_ok=True)
    r = run(fake, lib or Path(), cmd, tmp, lines, preload=preload,
            env={**(env or {}), "FAKE_CUDA_TRACE": str(trace)})
    ran = Counter(trace.read_text().split()) if trace.is_file() else Counter()
    return r, alone.stdout, ran


def entry(r: Run, i: int = 0) -> dict[str, int]:
    assert r.log, r.err
    return dict(r.log["entries"][i])


def test_the_fake_driver_refuses_a_function_of_an_ended_context(fake: FakeCuda) -> None:
    """What the tests below rely on: without the interposer, the program's own functions of
    the old context are gone (it loads them again), and fake_ctx runs to its end."""
    for end in ENDS.values():
        done = subprocess.run(fake.ctx_command(f"hK{end}hKc"), env=fake.env,
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        assert done.returncode == 0 and done.stdout.count("obs c") == 2, done.stderr


@pytest.mark.parametrize("direct", [False, True], ids=["cuGetProcAddress", "by symbol"])
@pytest.mark.parametrize("end", list(ENDS.values()), ids=list(ENDS))
def test_a_replacement_is_loaded_again_in_the_new_context(
        fake: FakeCuda, lib: Path, tmp_path: Path, end: str, direct: bool) -> None:
    """heat's new handle is setc's old one, and setc's heat's: each launch is looked up
    afresh (setc is not replaced, nor read with heat's parameter layout), and heat runs
    heat_one loaded in the new context; no launch fails."""
    r, expected, ran = traced(fake, lib, tmp_path, f"hhK{end}hKhhc", one_line(fake, tmp_path),
                              direct=direct)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran["heat_one"] == 5 and ran["heat"] == 0 and ran["setc"] == 2, ran
    e = entry(r)
    assert e["replaced"] == 5 and e["launch_failures"] == 0 and e["load_failures"] == 0, e


def test_two_ends_in_a_row_and_a_release_that_keeps_the_context(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """A retain and release in between (the context lives on), then a reset and a destroy
    before any launch of the new contexts: every heat still runs heat_one."""
    r, expected, ran = traced(fake, lib, tmp_path, "hrhDXhKRhc", one_line(fake, tmp_path))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran["heat_one"] == 4 and ran["heat"] == 0, ran
    assert entry(r)["launch_failures"] == 0, r.log


@pytest.mark.parametrize("end", list(ENDS.values()), ids=list(ENDS))
def test_a_fused_function_is_loaded_again_in_the_new_context(
        fake: FakeCuda, lib: Path, tmp_path: Path, end: str) -> None:
    """Twelve heat steps before and after: what is held runs before the context ends, and the
    new context's steps fuse with heat_x5 loaded there, as the first context's did."""
    lines = fused_line(tuned_image(fake, tmp_path), 5) + "\n"
    alone, _, once = traced(fake, lib, tmp_path, "h" * 12 + "c", lines)
    assert fused_groups(alone) == 2 and once["heat_x5"] == 2, alone.log
    r, expected, ran = traced(fake, lib, tmp_path, "h" * 12 + end + "h" * 12 + "c", lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert fused_groups(r) == 4 and ran["heat_x5"] == 4 and ran["heat"] == 24 - 20, ran
    assert entry(r)["launch_failures"] == 0 and entry(r)["load_failures"] == 0, r.log


@pytest.mark.parametrize("end", list(ENDS.values()), ids=list(ENDS))
def test_a_guarded_global_is_read_again_in_the_new_context(
        fake: FakeCuda, lib: Path, tmp_path: Path, end: str) -> None:
    """cheat's tuned kernel baked cheat_c = 0.25 in; a kernel (unseen by the guards) sets it
    to 0.3, and the context ends. The fake driver's global keeps 0.3 in the new context: the
    verification of the old one is not taken for it, the guard reads 0.3 and refuses, and the
    original cheat runs (the plain program's output)."""
    lines = cheat_line(fake, tmp_path, guard_field(loop_image_id(fake)), fused=False)
    r, expected, _ = traced(fake, lib, tmp_path, f"gK{end}gc", lines)
    assert r.rc == 0 and r.out == expected, r.err
    e = entry(r)
    assert e["replaced"] == 1 and e["guard_checks"] == 2 and e["guard_refusals"] == 1, e
    assert len(r.messages) == 1 and "cheat_c" in r.messages[0], r.err


@pytest.mark.slow  # builds the interposer with the sanitizers: 8 s
def test_the_sanitizer_build_finds_nothing_across_contexts(
        fake: FakeCuda, tmp_path: Path, sanitized: list[str]) -> None:  # noqa: F811
    """The cases above with the interposer built with AddressSanitizer and
    UndefinedBehaviorSanitizer: no finding, the plain program's output."""
    fused = fused_line(tuned_image(fake, tmp_path), 5) + "\n"
    guarded = cheat_line(fake, tmp_path, guard_field(loop_image_id(fake)), fused=False)
    cases = [("hhKXhKhDhRhKrhc", one_line(fake, tmp_path)),
             ("h" * 12 + "X" + "h" * 7 + "D" + "h" * 6 + "c", fused), ("gKXgRgc", guarded)]
    for script, lines in cases:
        r, expected, _ = traced(fake, None, tmp_path, script, lines, preload=sanitized,
                                env=SANITIZER_ENV)
        assert r.rc == 0 and r.out == expected, r.err
        assert not any(f in r.err for f in FINDINGS), r.err


def test_a_recording_names_each_launch_by_the_kernel_its_handle_names_now(
        fake: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recorded across a destroy and a reset: heat and setc swap handles each time, and each
    unit is of the kernel that ran, with its own parameters."""
    for k in ("LD_LIBRARY_PATH", "KERNFORGE_LIBNVRTC", "KFFAKE_NVRTC_DIR"):
        monkeypatch.setenv(k, fake.env[k])
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    status, units, problems, summaries = record_command(fake.ctx_command("hKXhKDhKc"),
                                                        tmp_path / "r", max_instances=8)
    assert status == 0 and not problems, problems
    assert sorted(u.name for u in units) == [f"{k}-{i}" for k in ("heat", "setc")
                                             for i in range(3)]
    for u in units:
        assert read_native(u).entry == u.name.split("-")[0]
    seen = Counter()
    for s in summaries:
        for k in s["kernels"]:
            seen[k["name"]] += k["seen"]
    assert seen == Counter({"heat": 3, "setc": 3}), summaries
