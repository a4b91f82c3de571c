"""A launcher killed by kill -9 leaves its line-file folder behind; the next run removes the
folders of launchers that no longer exist, and leaves those of live ones alone."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from kernforge.deploy import preload_run


def test_folders_of_dead_launchers_are_removed() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is free now (reuse within this test is vanishingly unlikely)
    stale = Path(tempfile.mkdtemp(prefix=f"kf-deploy-{dead.pid}-"))
    (stale / "deploy.tsv").write_text("x")
    live = Path(tempfile.mkdtemp(prefix=f"kf-deploy-{os.getpid()}-"))
    other = Path(tempfile.mkdtemp(prefix="kf-deploy-"))  # not a name this code writes
    try:
        preload_run.sweep_orphans()
        assert not stale.exists()
        assert live.is_dir() and other.is_dir()
    finally:
        for p in (stale, live, other):
            if p.exists():
                for f in p.iterdir():
                    f.unlink()
                p.rmdir()
