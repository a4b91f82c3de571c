"""The program's own check and timer, on real runs of small commands."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from kernforge.apps.checks import regex_values, seconds, take_reference, verdict
from kernforge.apps.manifest import AppManifestError, Check, Dataset, Manifest, Timer
from kernforge.apps.process import plain_env, run


def _m(tmp_path: Path, check: Check, timer: Timer | None = None) -> Manifest:
    timer = timer or Timer()
    return Manifest(path=tmp_path / "app.toml", name="t", source=tmp_path, build="true",
                    datasets=(Dataset("d", "true"),), check=check, timer=timer)


def _sh(tmp_path: Path, script: str):  # type: ignore[no-untyped-def]
    return run(["sh", "-c", script], cwd=tmp_path, env=plain_env(), timeout_s=30)


def test_regex_values_every_match_in_order() -> None:
    c = Check("regex", r"err=([-+.\deE]+) max=([-+.\deE]+)")
    assert regex_values(c, "err=1e-3 max=2\nx\nerr=-4 max=9\n") == [1e-3, 2.0, -4.0, 9.0]
    assert regex_values(c, "nothing") is None


def test_regex_check_against_the_reference_and_its_tolerance(tmp_path: Path) -> None:
    m = _m(tmp_path, Check("regex", r"sum ([0-9.eE+-]+)", rel=1e-6))
    d = m.datasets[0]
    ref = take_reference(m, d, _sh(tmp_path, "echo sum 100.0"), tmp_path, tmp_path)
    assert ref == {"values": [100.0]}
    assert verdict(m, d, _sh(tmp_path, "echo sum 100.00001"), tmp_path, tmp_path, ref).ok
    bad = verdict(m, d, _sh(tmp_path, "echo sum 100.1"), tmp_path, tmp_path, ref)
    assert not bad.ok and "over the tolerance" in bad.reason and bad.error == pytest.approx(0.1)
    assert not verdict(m, d, _sh(tmp_path, "echo sum nan"), tmp_path, tmp_path, ref).ok
    assert not verdict(m, d, _sh(tmp_path, "echo sum 100; exit 3"), tmp_path, tmp_path,
                       ref).ok
    with pytest.raises(AppManifestError, match="never matches"):
        take_reference(m, d, _sh(tmp_path, "echo total 100"), tmp_path, tmp_path)


def test_a_pattern_without_groups_only_has_to_match(tmp_path: Path) -> None:
    m = _m(tmp_path, Check("regex", r"^PASS$"))
    d = m.datasets[0]
    assert verdict(m, d, _sh(tmp_path, "echo PASS"), tmp_path, tmp_path, {}).ok
    assert not verdict(m, d, _sh(tmp_path, "echo FAIL"), tmp_path, tmp_path, {}).ok


@pytest.mark.parametrize("fmt", ["text", "float64", "bytes"])
def test_output_files_under_a_tolerance(tmp_path: Path, fmt: str) -> None:
    m = _m(tmp_path, Check("files", files=("out.dat",), format=fmt, abs=1e-9))
    d = m.datasets[0]

    def write(values: list[float]) -> None:
        if fmt == "text":
            (tmp_path / "out.dat").write_text(" ".join(f"{v!r}" for v in values))
        else:
            np.asarray(values).tofile(tmp_path / "out.dat")

    ok = _sh(tmp_path, "true")
    write([1.0, 2.0])
    ref = take_reference(m, d, ok, tmp_path, tmp_path / "run")
    write([1.0, 2.0 + 1e-12])
    assert verdict(m, d, ok, tmp_path, tmp_path / "run", ref).ok is (fmt != "bytes")
    write([1.0, 2.5])
    assert not verdict(m, d, ok, tmp_path, tmp_path / "run", ref).ok
    (tmp_path / "out.dat").unlink()
    assert "did not write" in verdict(m, d, ok, tmp_path, tmp_path / "run", ref).reason


def test_timer_wall_or_the_programs_own(tmp_path: Path) -> None:
    ran = _sh(tmp_path, "echo 'kernel time 12.5 ms'; echo 'kernel time 10 ms'")
    assert seconds(Timer(), ran) == ran.seconds
    assert math.isclose(seconds(Timer("regex", r"time ([0-9.]+) ms", "ms"), ran), 0.010)
    assert seconds(Timer("regex", r"elapsed ([0-9.]+)", "s"), ran) is None


def test_a_command_that_hangs_is_killed(tmp_path: Path) -> None:
    ran = run(["sh", "-c", "sleep 30 & sleep 30"], cwd=tmp_path, env=plain_env(),
              timeout_s=0.5)
    assert ran.timed_out and ran.returncode == 124 and ran.seconds < 10


def test_the_switch_removes_kernforge_from_the_environment() -> None:
    env = plain_env({"LD_PRELOAD": "/x/libkfinterpose-1.so:/y/other.so",
                     "KERNFORGE_DEPLOY": "spec.json", "PATH": "/bin"})
    assert env == {"LD_PRELOAD": "/y/other.so", "PATH": "/bin"}


def test_a_program_that_prints_fail_is_blocked_by_its_own_check(tmp_path: Path) -> None:
    from kernforge.apps.checks import printed_failure
    from kernforge.apps.manifest import load_manifest
    from kernforge.apps.store import AppStore
    from kernforge.apps.workflow import AppRun

    drafted = Check("regex", r"\A(?![\s\S]*\bFAIL)[\s\S]*^ *PASS *$")  # as app draft writes it
    out = "Average time 0.1 (us)\n-1.0 (device) != 2034.0 (reference)\nFAIL\n"
    assert printed_failure(drafted, out) == "-1.0 (device) != 2034.0 (reference) / FAIL"
    assert printed_failure(drafted, "FAIL\n") == "FAIL"
    assert printed_failure(drafted, "PASS\n") is None
    assert printed_failure(drafted, "nothing\n") is None  # a pattern to fix
    assert printed_failure(Check("regex", r"sum ([0-9.]+)"), "FAIL\n") is None  # a value
    m = _m(tmp_path, drafted)
    v = verdict(m, m.datasets[0], _sh(tmp_path, "echo 'Test FAILED'"), tmp_path, tmp_path, {})
    assert not v.ok and v.reason == "it printed 'Test FAILED'"
    src = tmp_path / "src"
    src.mkdir()
    manifest = tmp_path / "app.toml"
    manifest.write_text(f"name = \"p\"\nsource = \"{src}\"\nbuild = \"true\"\n"
                        "[[datasets]]\nname = \"d\"\nrun = \"printf 'x != y\\\\nFAIL\\\\n'\"\n"
                        "[check]\nkind = \"regex\"\npattern = '^PASS$'\n")
    final = AppRun(load_manifest(manifest), tmp_path / "run").run()
    assert final.state == "BLOCKED", final.reason
    m1 = AppStore.open(tmp_path / "run").milestone("M1")
    assert m1 is not None and m1.reason == ("dataset d fails its own check: it printed "
                                            "'x != y / FAIL'")


def test_a_printed_time_of_zero_is_refused(tmp_path: Path) -> None:
    from kernforge.apps.harness import AppHarness, RunFailed

    timer = Timer("regex", r"time: *([0-9.eE+-]+) *\(s\)", "s")
    m = _m(tmp_path, Check("exit"), timer)
    h = AppHarness(m, tmp_path / "out")
    d = m.datasets[0]
    with pytest.raises(AppManifestError, match="reads 0 s") as info:
        h.reference(d, _sh(tmp_path, "echo 'time: 0.000000 (s)'"))
    assert "more digits" in (info.value.hint or "")
    h.reference(d, _sh(tmp_path, "echo 'time: 0.001234 (s)'"))
    d0 = Dataset("d", "echo 'time: 0.000000 (s)'")
    with pytest.raises(RunFailed, match="reads 0 s"):
        h.timed(d0, h.original())


@pytest.mark.parametrize(("printed", "unit", "share"), [
    ("0.000030", "s", "3.3"),   # HeCBench's "%f (s)" of a 30 us kernel: 2 digits
    ("30", "ms", "3.3"),        # an integer
    ("1.2e-05", "s", "8.3"),    # two digits in exponent form
])
def test_a_printed_time_too_coarse_to_compare_is_refused(tmp_path: Path, printed: str,
                                                         unit: str, share: str) -> None:
    """0.000030 against 0.000029 reads 1.034x, past the 2 % noise band, from rounding alone
    (29.52 us against 29.48 us): the baseline's printed time must resolve 1 % of itself."""
    from kernforge.apps.harness import AppHarness

    timer = Timer("regex", r"time: *([0-9.eE+-]+)", unit)
    m = _m(tmp_path, Check("exit"), timer)
    h = AppHarness(m, tmp_path / "out")
    with pytest.raises(AppManifestError, match=f"reads {re.escape(printed)} .{unit}.: its "
                                               f"last digit is {share} % of it"):
        h.reference(m.datasets[0], _sh(tmp_path, f"echo 'time: {printed}'"))
    for fine in ("0.003000", "300", "1.234e-05", "0.000123456"):
        h.reference(m.datasets[0], _sh(tmp_path, f"echo 'time: {fine}'"))


def test_the_progress_of_an_extended_comparison_never_reads_11_of_10() -> None:
    from kernforge.apps.harness import run_label

    assert run_label(10, 10, 30) == "run 10 of 10 (up to 30 while inconclusive)"
    assert run_label(11, 10, 30) == ("run 11 of up to 30 (more runs: the verdict is still "
                                     "inconclusive)")


def test_a_long_strategy_reason_says_where_to_read_it_whole() -> None:
    from kernforge.apps.workflow import brief

    assert brief("short", Path("runs/a")) == "short"
    cut = brief("word " * 100, Path("runs/a"))
    assert len(cut) <= 240 and cut.endswith("(in full: kernforge app report runs/a)")
