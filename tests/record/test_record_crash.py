"""kill -9 in the middle of recording leaves only complete units (and .tmp-* leftovers)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernforge.record import clean_partial, find_recordings, load_recording

APP = r'''
import sys
import numpy as np
from kernforge.backends import Kernel
from kernforge.record import record

SRC = """
def step(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
"""
n = 1 << 17  # 1 MiB per array: 3 MiB written per unit, most of the time spent writing
k = Kernel(SRC, "step", backend="null")
x, y = np.random.default_rng(0).random(n), np.zeros(n)
with record(sys.argv[1], max_instances=None):
    for _ in range(100000):
        k(x, y, 0.5, n)
'''


def _count(root: Path) -> int:
    return len(find_recordings(root)) if root.exists() else 0


def _run_and_kill(root: Path, delay: float) -> None:
    before = _count(root)
    proc = subprocess.Popen([sys.executable, "-c", APP, str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while _count(root) <= before:
            if proc.poll() is not None:
                pytest.fail(f"recorder exited early: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("no unit was written within 30 s")
            time.sleep(0.002)
        time.sleep(delay)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def _check_root(root: Path) -> None:
    for d in root.iterdir():
        if d.name.startswith(".tmp-"):
            continue
        assert (d / "manifest.json").is_file(), f"{d} is a unit without a manifest"
    units = find_recordings(root)
    assert units
    for unit in units:
        rec = load_recording(unit, verify=True)  # hashes every blob
        for a in rec.args:
            if a.is_array:
                assert rec.prologue(a.name).shape == a.shape
                assert rec.expected(a.name).shape == a.shape
        assert not any(f.name.startswith(".tmp-") for f in (unit / "blobs").iterdir())


def test_sigkill_leaves_only_complete_units(tmp_path: Path) -> None:
    root = tmp_path / "rec"
    rng = random.Random(1234)
    saw_partial = False
    try:
        for run in range(8):
            _run_and_kill(root, rng.uniform(0.0, 0.06))
            _check_root(root)
            saw_partial |= any(d.name.startswith(".tmp-") for d in root.iterdir())
            if run >= 2 and saw_partial:
                break
        assert saw_partial, "never killed mid-write: the test did not exercise the crash"
        removed = clean_partial(root)
        assert removed and not any(d.name.startswith(".tmp-") for d in root.iterdir())
        _check_root(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
