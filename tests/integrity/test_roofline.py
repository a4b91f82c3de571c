"""The roofline bound: bytes that must move, copy bandwidth, the refusal and its self-check."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.backends import get_backend
from kernforge.harness.roofline import Bandwidth, copy_bandwidth, must_move_bytes, roofline_check

BW = Bandwidth(10e9, 64 << 20, 0.0134, "test")


def test_must_move_counts_changed_outputs_and_whole_inputs() -> None:
    x = np.zeros(100)  # input: 800 bytes
    before, after = np.zeros(50, np.float32), np.zeros(50, np.float32)
    after[:10] = 1.0  # 10 changed elements must be written: 40 bytes
    assert must_move_bytes([(x, x, False), (before, after, True)]) == 840
    assert must_move_bytes([(before, before, True)]) == 0


def test_an_output_left_unchanged_is_not_counted_as_read() -> None:
    """Issue 43: apply_boundary re-imposes faces that already hold their values; its grid
    (writable, unchanged) was counted as 16 MiB read and the unmodified seed refused."""
    grid = np.zeros(1 << 21)
    assert must_move_bytes([(grid, grid, False, False)]) == 0  # writable, left unchanged
    assert must_move_bytes([(grid, grid, False, True)]) == grid.nbytes  # const input: read


def test_refused_below_the_bound_and_ok_above() -> None:
    moved = 10 ** 9  # 0.1 s at 10 GB/s; slack 0.5 -> refused below 0.05 s
    refused = roofline_check(moved, BW, 0.01, 0.2)
    assert refused.refused and refused.bound_s == pytest.approx(0.1) and "below" in refused.note
    assert roofline_check(moved, BW, 0.06, 0.2).verdict == "ok"
    assert roofline_check(moved, BW, 0.06, 0.2, slack=1.0).refused


def test_the_bound_is_calibrated_by_the_recorded_kernel_of_the_same_run() -> None:
    """The recorded kernel below the bound (it reads part of its input): the bound becomes
    its time, so the gate still refuses a candidate more than 2x faster than it."""
    check = roofline_check(10 ** 9, BW, 0.0015, 0.002)  # the original reads less than it has
    assert check.verdict == "ok" and "calibrated by the recorded kernel" in check.note
    assert check.bound_s == pytest.approx(0.002)
    fake = roofline_check(10 ** 9, BW, 0.0009, 0.002)
    assert fake.refused and "in the same run" in fake.note
    assert roofline_check(10 ** 9, None, 0.001, None).verdict == "not-applicable"
    assert roofline_check(0, BW, 0.001, None).verdict == "not-applicable"


@pytest.mark.parametrize("name", ["null", "cpu"])
def test_copy_bandwidth_is_measured_with_the_backend(name: str) -> None:
    be = get_backend(name)
    bw = copy_bandwidth(be, 1 << 20)
    assert bw is not None and bw.nbytes == 64 << 20 and 1e8 < bw.bytes_per_s < 1e13
    assert copy_bandwidth(be, 1 << 20) is bw  # cached per process
    assert name in bw.method
