"""Each unit's cache state on the CPU backend: a unit whose data fits the last-level cache is
replayed warm, a larger one flushed; ``--cache`` overrides it and is kept with the unit, and
validate (the gate of tune and export) measures in the unit's state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kernforge
from kernforge.backends.cpu import llc_bytes
from kernforge.cli.main import main
from kernforge.core import Recording
from kernforge.record import find_recordings, load_recording
from kernforge.replay.cache_protocol import STORE, apply_mode, footprint, protocol_for, resolve
from kernforge.replay.validate import validate

SRC = r"""
void scale(const double *restrict x, double *restrict y, long n) {
    for (long i = 0; i < n; i++) y[i] = 2.0 * x[i];
}
"""


def _unit(root: Path, n: int) -> Recording:
    k = kernforge.Kernel(SRC, "scale", backend="cpu")
    x, y = np.arange(float(n)), np.zeros(n)
    with kernforge.record(root, max_instances=1):
        k(x, y, n)
    return load_recording(find_recordings(root)[0])


@pytest.fixture
def small(tmp_path: Path) -> Recording:
    return _unit(tmp_path / "small", 1 << 12)  # 64 KiB


def test_a_unit_that_fits_the_cache_is_warm(small: Recording) -> None:
    assert footprint(small) == 2 * 8 * (1 << 12)
    c = protocol_for(small)
    assert (c.protocol, c.by) == ("warm", "footprint") and "last-level cache" in c.reason
    assert resolve(small, None) is False and resolve(small, True) is True


@pytest.mark.slow
def test_a_unit_larger_than_half_the_cache_is_flushed(tmp_path: Path) -> None:
    n = llc_bytes() // 16 + 4096  # two float64 arrays: just over half the cache
    big = _unit(tmp_path / "big", n)
    assert footprint(big) > llc_bytes() // 2
    assert protocol_for(big).protocol == "flushed"


def test_the_override_is_kept_with_the_unit_and_auto_drops_it(small: Recording) -> None:
    assert protocol_for(small, "flushed").by == "user"
    apply_mode(small.path, "flushed")
    assert (small.path / STORE).is_file()
    assert protocol_for(small).protocol == "flushed"  # what tune's gates and export see
    apply_mode(small.path, "auto")
    assert not (small.path / STORE).exists() and protocol_for(small).protocol == "warm"


def test_validate_measures_in_the_units_state(small: Recording) -> None:
    v = validate(small, passes=2, per_pass=1, warmup=1)
    assert v.notes["cache"]["protocol"] == "warm"
    apply_mode(small.path, "flushed")
    v = validate(small, passes=2, per_pass=1, warmup=1)
    assert v.notes["cache"] == {"protocol": "flushed", "by": "user",
                                "reason": "--cache flushed given"}


def test_replay_says_the_protocol_and_takes_the_override(
        small: Recording, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(small.path), "--repeat", "2", "--warmup", "0"]) == 0
    assert f"{small.name}: cache warm (its data" in capsys.readouterr().out
    assert main(["replay", str(small.path), "--repeat", "2", "--warmup", "0",
                 "--cache", "flushed"]) == 0
    assert f"{small.name}: cache flushed (--cache flushed given)" in capsys.readouterr().out
    assert main(["replay", str(small.path), "--no-flush", "--cache", "flushed"]) == 2


def test_a_kept_choice_survives_a_command_without_cache(
        small: Recording, capsys: pytest.CaptureFixture[str]) -> None:
    """`tune --resume` typed without `--cache flushed` must not switch the study's state."""
    assert main(["replay", str(small.path), "--repeat", "1", "--warmup", "0",
                 "--cache", "flushed"]) == 0
    assert main(["replay", str(small.path), "--repeat", "1", "--warmup", "0"]) == 0
    assert f"{small.name}: cache flushed (--cache flushed given)" in capsys.readouterr().out
    assert protocol_for(small).protocol == "flushed"
    assert main(["replay", str(small.path), "--repeat", "1", "--warmup", "0",
                 "--cache", "auto"]) == 0  # forgets it
    assert protocol_for(small).protocol == "warm"
