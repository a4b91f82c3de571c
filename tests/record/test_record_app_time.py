"""A native unit's time in the program is of launches that did its work: recorded for real by
the interposer on the fake CUDA driver (whose events time the kernel's host run, so a launch on
more points takes longer) from fake_work_app, which launches one kernel on work of several
sizes, as a CuPy program launches a ufunc's kernel on arrays of several sizes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kernforge.core.native import NativeRecording
from kernforge.pipeline.run_app import record_command
from kernforge.record import interposer
from kernforge.record.native_format import read_native
from kernforge.record.native_timing import app_times, unit_timing
from kernforge.testing.fakedriver import FakeCuda

BIG, SMALL = 1 << 18, 128  # points: the fake's heat takes ~2000x longer on BIG


@pytest.fixture(scope="module")
def work_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("work_app") / "fake_work_app"
    src = Path(__file__).with_name("fake_work_app.c")
    subprocess.run([interposer.compiler(), "-O1", "-o", str(exe), str(src), "-ldl"],
                   check=True, capture_output=True)
    return exe


def _record(fake: FakeCuda, app: Path, out: Path, *launches: str
            ) -> tuple[list[NativeRecording], list[dict]]:
    status, units, problems, counts = record_command([str(app), str(fake.kernels), *launches],
                                                     out, max_instances=1)
    assert status == 0 and not problems, problems
    return sorted((read_native(u) for u in units), key=lambda r: -r.grid[0]), counts


def _timed(counts: list[dict]) -> list[list[float]]:
    """The interposer's timed launches of each function named heat (summary-<pid>.json)."""
    return [k["app_ms"] for s in counts for k in s.get("kernels", []) if k["name"] == "heat"]


def test_the_time_is_of_later_launches_of_the_same_work_not_of_other_sizes(
        on_fake: FakeCuda, work_app: Path, tmp_path: Path) -> None:
    """The recorded launch (BIG), five on SMALL, three on BIG with the buffers swapped: the
    in-program time is the median of the three, never of the small launches between."""
    (rec,), counts = _record(on_fake, work_app, tmp_path / "r", str(BIG), *[str(SMALL)] * 5,
                             *[f"{BIG}x"] * 3)
    cap = rec.capture
    assert cap["app_time_of"] == "3 unrecorded launches of the same work (events)", cap
    assert [len(t) for t in _timed(counts)] == [3]
    # the same work: of the order of the recorded launch's own time (the small ones take
    # 1/2000 of it)
    assert cap["app_time_ms"] > 0.2 * cap["recorded_launch_ms"], cap


def test_without_a_later_launch_of_its_work_the_time_is_the_recorded_launchs(
        on_fake: FakeCuda, work_app: Path, tmp_path: Path) -> None:
    """Later launches of other sizes, or of the same shape with another scalar, are other
    work: none is timed, and the unit's time is its recorded launch's own."""
    (rec,), counts = _record(on_fake, work_app, tmp_path / "r", str(BIG), *[str(SMALL)] * 3,
                             *[f"{BIG}c"] * 3)
    cap = rec.capture
    assert cap["app_time_of"].startswith("the recorded launch"), cap
    assert "recorded_launch_ms" not in cap and cap["app_time_ms"] > 0
    assert _timed(counts) == [[]]


def test_a_function_of_the_same_name_from_another_module_is_other_work(
        on_fake: FakeCuda, work_app: Path, tmp_path: Path) -> None:
    """Two functions named heat (the module loaded twice), one launched on BIG, the other on
    SMALL: each unit's time is of its own function's launches."""
    (big, small), counts = _record(on_fake, work_app, tmp_path / "r", str(BIG),
                                   *[f"{SMALL}m"] * 4, *[f"{BIG}x"] * 2)
    assert (big.name, small.name) == ("heat", "heat") and big.grid[0] > small.grid[0]
    assert big.capture["app_time_of"].startswith("2 unrecorded launches of the same work")
    assert small.capture["app_time_of"].startswith("3 unrecorded launches of the same work")
    assert sorted(len(t) for t in _timed(counts)) == [2, 3]
    assert big.capture["app_time_ms"] > 20 * small.capture["app_time_ms"], \
        (big.capture, small.capture)


def test_timing_picks_the_units_work_among_functions_of_one_name() -> None:
    """Two summaries' functions named alike: only the times with the unit's key count; a
    unit.json without a key (an older interposer's) takes every time of the name."""
    summaries = [{"pid": 7, "kernels": [
        {"name": "cupy_absolute", "app_ms": [0.004, 0.005], "app_keys": ["a" * 16, "b" * 16]},
        {"name": "cupy_absolute", "app_ms": [0.013, 0.014], "app_keys": ["c" * 16] * 2},
        {"name": "other", "app_ms": [1.0]}]}]
    app = app_times(summaries)
    unit = {"pid": 7, "function": "cupy_absolute", "app_time_ms": 0.02}
    assert unit_timing({**unit, "work_key": "c" * 16}, app)["app_time_ms"] == 0.0135
    assert unit_timing({**unit, "work_key": "d" * 16}, app)["app_time_ms"] == 0.02
    assert unit_timing(unit, app)["app_time_ms"] == pytest.approx(0.009)
    assert app[(7, "other")] == [(1.0, None)]
