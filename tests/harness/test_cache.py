"""The cache state of a replay (harness/cache.py): the rules and their reasons."""

from __future__ import annotations

import pytest

from kernforge.core import ConfigError
from kernforge.harness.cache import CacheChoice, by_footprint, by_program_time, user_choice


def test_a_footprint_within_half_the_cache_is_warm_and_beyond_it_flushed() -> None:
    warm = by_footprint(1 << 20, 32 << 20, "L2")
    assert warm.protocol == "warm" and not warm.flush and warm.by == "footprint"
    assert "fits in the L2 (32 MiB)" in warm.reason
    assert by_footprint(16 << 20, 32 << 20).protocol == "warm"  # exactly half still fits
    cold = by_footprint((16 << 20) + 1, 32 << 20)
    assert cold.protocol == "flushed" and cold.flush and "exceeds half" in cold.reason


def test_an_unknown_cache_keeps_the_default() -> None:
    c = by_footprint(1, None)
    assert (c.protocol, c.by) == ("flushed", "default")


def test_the_in_program_time_picks_the_nearer_protocol() -> None:
    c = by_program_time(10e-6, flushed_s=18e-6, warm_s=10.5e-6)
    assert c.protocol == "warm" and c.by == "in-program time" and "1.80x" in c.reason
    assert by_program_time(10e-6, flushed_s=10.2e-6, warm_s=6e-6).protocol == "flushed"
    assert by_program_time(10e-6, flushed_s=20e-6, warm_s=5e-6).protocol == "flushed"  # a tie
    with pytest.raises(ConfigError):
        by_program_time(0.0, 1.0, 1.0)


def test_the_user_choice_and_its_json() -> None:
    assert user_choice("auto") is None
    c = user_choice("warm")
    assert c is not None and c.by == "user" and CacheChoice.from_json(c.to_json()) == c
    assert CacheChoice.from_json({"protocol": "lukewarm", "by": "x", "reason": "y"}) is None
    with pytest.raises(ConfigError, match="auto, warm, flushed"):
        user_choice("hot")


def test_replays_within_noise_of_each_other_keep_the_default() -> None:
    """Flushed and warm within 3% of each other: noise, not a cache state; identical units
    (HeCBench heat's, on the fake driver) flipped between protocols on it."""
    near_warm = by_program_time(4.15e-6, flushed_s=4.27e-6, warm_s=4.16e-6)
    assert near_warm.protocol == "flushed" and "less than 3%" in near_warm.reason
    assert by_program_time(4.15e-6, flushed_s=4.6e-6, warm_s=4.16e-6).protocol == "warm"
