"""One rule chooses every unit's cache state (replay/cache_protocol.py ``choose``), whatever
recorded it: the committed format-v1 recording (tests/data/v1, no time in the program) takes
its footprint's protocol or the user's, never replayed to decide; the committed native unit
(tests/data/native_v2, its time in the program recorded) is replayed both ways under ``auto``
and keeps the state nearer to that time, while a user's ``--cache`` wins over both."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernforge.core import Unit
from kernforge.record import read_unit
from kernforge.replay.cache_protocol import choose, stored

DATA = Path(__file__).parents[1] / "data"


def _copy(tmp_path: Path, unit: str) -> Unit:
    shutil.copytree(DATA / unit, tmp_path / "u")
    return read_unit(tmp_path / "u", verify=True)


class Replays:
    """``replay_s``: what each flush state replays in (seconds), and the calls it got."""

    def __init__(self, flushed: float, warm: float) -> None:
        self.times = {True: flushed, False: warm}
        self.calls: list[bool] = []

    def __call__(self, flush: bool) -> float:
        self.calls.append(flush)
        return self.times[flush]


def test_a_recording_takes_its_footprints_state_unreplayed(tmp_path: Path) -> None:
    rec = _copy(tmp_path, "v1/axpy-0")
    assert rec.holds == {"source"} and rec.in_program_s is None
    replays = Replays(1.0, 1.0)
    c = choose(rec, None, replays)
    assert (c.protocol, c.by) == ("flushed", "default") and replays.calls == []
    c = choose(rec, "warm", replays)
    assert (c.protocol, c.by) == ("warm", "user") and stored(rec.path) == c
    assert choose(rec, None, replays) == c  # kept with the unit
    assert choose(rec, "auto", replays).by == "default" and replays.calls == []


@pytest.mark.parametrize(("flushed", "warm", "kept"), [(0.21e-6, 2e-6, "flushed"),
                                                       (9e-6, 0.2e-6, "warm")])
def test_a_native_unit_is_calibrated_against_its_time_in_the_program(
        tmp_path: Path, flushed: float, warm: float, kept: str) -> None:
    unit = _copy(tmp_path, "native_v2/heat-0")
    assert unit.holds == {"image"} and unit.in_program_s == pytest.approx(0.211e-6)
    replays = Replays(flushed, warm)
    c = choose(unit, None, replays)
    assert (c.protocol, c.by) == (kept, "in-program time")
    assert sorted(replays.calls) == [False, True] and stored(unit.path) == c
    c = choose(unit, "warm", replays)  # the user's choice is not measured
    assert (c.protocol, c.by) == ("warm", "user") and len(replays.calls) == 2
