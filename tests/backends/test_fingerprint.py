"""The content fingerprint (host reference; the GPU test checks the device version equals it)."""

from __future__ import annotations

import numpy as np
import pytest

from kernforge.backends.fingerprint import host_fingerprint, word_size


@pytest.mark.parametrize("dtype,n", [(np.float32, 1000), (np.float64, 7), (np.float16, 5),
                                     (np.uint8, 3), (np.int64, 0)])
def test_equal_contents_equal_fingerprints(dtype, n) -> None:
    a = np.random.default_rng(0).random(n).astype(dtype)
    assert host_fingerprint(a) == host_fingerprint(a.copy())
    assert host_fingerprint(a)[1] == a.nbytes


def test_one_bit_anywhere_changes_it() -> None:
    a = np.random.default_rng(1).random(4096).astype(np.float32)
    ref = host_fingerprint(a)
    bits = a.view(np.uint32)
    for i in (0, 1, 2047, 4095):
        for bit in (0, 31):
            b = bits.copy()
            b[i] ^= np.uint32(1 << bit)
            assert host_fingerprint(b.view(np.float32)) != ref


def test_order_and_negative_zero_matter() -> None:
    a = np.array([1.0, 2.0], np.float32)
    assert host_fingerprint(a) != host_fingerprint(a[::-1].copy())
    assert host_fingerprint(np.array([0.0])) != host_fingerprint(np.array([-0.0]))


def test_chunking_does_not_change_it() -> None:
    a = np.random.default_rng(2).random(10_001).astype(np.float32)
    assert host_fingerprint(a, chunk=97) == host_fingerprint(a)


def test_word_size() -> None:
    assert (word_size(16), word_size(12), word_size(6), word_size(5)) == (8, 4, 2, 1)
