"""Hostile cases for held launches run unfused by a fused entry's one-launch replacement
("unfused:next", record/native/kf_unfused.c), run for real on the fake CUDA driver: threads
flushing each other's chains, a replacement that replaces only some of the held launches, the
order in which entries of one kernel are tried."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from deploy_run import (
    fused_groups,
    fused_line,
    heat_key,
    line,
    plain,
    run,
    tuned_image,
)
from test_interposer_defer_stress import FINDINGS, sanitized  # noqa: F401
from test_interposer_unfused import TAG, one_line, pair, traced

from kernforge.testing.fakedriver import FakeCuda


def _threads(fake: FakeCuda, lib: Path, tmp: Path, streams: bool,
             preload: list[str] | None = None, env: dict[str, str] | None = None) -> None:
    """32 threads of 41 heat launches each: on streams of their own (each a chain), or all
    on the NULL stream (one chain that every thread's launch breaks and flushes)."""
    cmd = fake.threads_command(32, 41, streams=streams)
    expected = plain(fake, cmd)
    trace = tmp / "trace.txt"
    trace.unlink(missing_ok=True)
    r = run(fake, lib, cmd, tmp, pair(tuned_image(fake, tmp)),
            env={**(env or {}), "FAKE_CUDA_TRACE": str(trace)}, preload=preload)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err[-3000:]
    assert not any(f in r.err for f in FINDINGS), r.err[-3000:]
    assert r.log, r.err
    held = r.log["flushed_unfused"]
    assert fused_groups(r) * 5 + held == 32 * 41, r.log
    assert r.log["flushed_one_launch"] == held, r.log  # every held launch: the replacement
    ran = Counter(trace.read_text().split())
    assert ran == Counter({"heat_x5": fused_groups(r), "heat_one": held} if fused_groups(r)
                          else {"heat_one": held}), ran


@pytest.mark.parametrize("streams", [True, False], ids=["own streams", "the NULL stream"])
def test_threads_flushing_each_other_run_every_launch_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, streams: bool) -> None:
    for _ in range(3):
        _threads(fake, lib, tmp_path, streams)


@pytest.mark.slow  # the sanitizer build takes several seconds
def test_the_sanitizer_build_finds_nothing_with_threads_and_the_replacement(
        fake: FakeCuda, sanitized: list[str], tmp_path: Path) -> None:  # noqa: F811
    env = {"ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}
    for streams in (True, False):
        _threads(fake, Path(sanitized[-1]), tmp_path, streams, preload=sanitized, env=env)


def test_a_one_launch_line_does_not_shadow_a_later_fused_line_of_its_kernel(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """The one-launch entry of the first fused line (another problem, n=999) matches any heat
    launch; it is tried after every other line of heat, so the second fused line (n=1000)
    still holds and fuses the loop's launches, as it did before the first one named a
    one-launch entry."""
    image = tuned_image(fake, tmp_path)
    lines = (fused_line(image, 5, key=heat_key(n=999)) + TAG + "\n" + one_line(image, key="*")
             + "\n" + fused_line(image, 5) + "\n")
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran == Counter({"heat_x5": 2, "heat": 3}) and fused_groups(r) == 2, ran
    # a launch no fused line holds still runs it: with fusion off, every one
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", lines,
                              env={"KERNFORGE_FUSE": "0"})
    assert r.rc == 0 and r.out == expected and ran == Counter({"heat_one": 13}), ran


def test_an_ordinary_line_of_the_launch_comes_before_a_one_launch_line(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """A kernel's own (top-level) line after a fused line's one-launch line: with fusion off
    it replaces the launches, not the one-launch entry that happens to come first."""
    image = tuned_image(fake, tmp_path)
    own = line("heat", image, key=heat_key(), new_block="128,1,1")  # the tuned image's heat
    lines = (fused_line(image, 5, key=heat_key(n=999)) + TAG + "\n" + one_line(image, key="*")
             + "\n" + own + "\n")
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", lines,
                              env={"KERNFORGE_FUSE": "0"})
    assert r.rc == 0 and r.out == expected, r.err
    assert ran == Counter({"heat": 13}) and r.log, ran
    assert [e["replaced"] for e in r.log["entries"]] == [0, 0, 13], r.log


NOT_LINKED = {
    "two tagged fused lines in a row": "{f}{t}\n{f}{t}\n{o}\n",
    "a kernel whose name heat begins": "{f}{t}\n{p}\n",
    "a kernel whose name begins heat's": "{f}{t}\n{q}\n",
}


@pytest.mark.parametrize("text", list(NOT_LINKED.values()), ids=list(NOT_LINKED))
def test_a_tagged_line_without_its_own_one_launch_line_runs_the_originals(
        fake: FakeCuda, lib: Path, tmp_path: Path, text: str) -> None:
    """Only a line of the very same kernel name links: the first of two tagged fused lines
    (which holds every launch, being first) has none and runs what it holds as the
    program's heat, told once; the second's link is never used."""
    image = tuned_image(fake, tmp_path)
    lines = text.format(f=fused_line(image, 5), t=TAG, o=one_line(image),
                        p=line("heatx", image, key=heat_key(), entry="heat_one"),
                        q=line("hea", image, key=heat_key(), entry="heat_one"))
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c" + "s" * 7 + "y", lines)
    assert r.rc == 0 and r.out == expected, r.err
    assert ran == Counter({"heat_x5": 3, "heat": 5}), ran
    told = [m for m in r.messages if "unfused:next" in m]
    assert len(told) == 1 and "line 1" in told[0] and len(r.messages) == 1, r.err


CAPTURED = {"the one-launch line of a fused line": True, "an ordinary line": False}


@pytest.mark.parametrize("tagged", list(CAPTURED.values()), ids=list(CAPTURED))
def test_a_replacement_first_loaded_inside_a_stream_capture_keeps_the_capture(
        fake: FakeCuda, lib: Path, tmp_path: Path, tagged: bool) -> None:
    """The loop's first steps are captured into a graph (global mode, as CUDA's default): a
    captured launch is never held, so it runs the one-launch line, whose module loads then,
    inside the capture. A module load there is a "potentially unsafe" call that fails and
    invalidates the program's capture, unless the interposer's thread is in relaxed mode for
    it (the fake driver enforces CUDA's rule): the graph holds the replacement, and the
    program's capture succeeds."""
    image = tuned_image(fake, tmp_path)
    lines = pair(image) if tagged else one_line(image) + "\n"
    r, expected, ran = traced(fake, lib, tmp_path, "G" + "s" * 13 + "c", lines)
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    held = {"heat_x5": 2, "heat_one": 3 + 3} if tagged else {"heat_one": 3 + 13}
    assert ran == Counter(held), ran


def test_two_fused_lines_of_one_kernel_each_with_its_one_launch_line(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """What merging two problems' combined specs writes: each fused line and its one-launch
    line, for n=999 and n=1000. The loop (n=1000) fuses under the second pair, and what it
    holds runs the second one-launch line; the first pair's lines take no launch."""
    image = tuned_image(fake, tmp_path)
    first = pair(image, one={"key": heat_key(n=999)}).replace(
        fused_line(image, 5), fused_line(image, 5, key=heat_key(n=999)))
    r, expected, ran = traced(fake, lib, tmp_path, "s" * 13 + "c", first + pair(image))
    assert r.rc == 0 and r.out == expected and not r.messages, r.err
    assert ran == Counter({"heat_x5": 2, "heat_one": 3}), ran
    assert r.log and [e["replaced"] for e in r.log["entries"]] == [0, 0, 0, 3], r.log
    assert [e.get("flushed_one_launch") for e in r.log["entries"]] == [0, None, 3, None]
