"""Helpers of the application tests: a program on the fake CUDA driver (no GPU needed), built
from source by its manifest's build command with the host compiler, and its manifest."""

from __future__ import annotations

import shutil
import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

from kernforge.apps import fused as fz
from kernforge.apps.adapter import layout
from kernforge.apps.probe import Recognized
from kernforge.core.native import NativeRecording
from kernforge.testing.fakedriver import FakeCuda

AGENT = Path(__file__).with_name("fake_agent.py")


def fake_program(root: Path, sleep: float = 0.05) -> Path:
    """The fake driver's test application as a program's source directory: its C sources,
    and ``run.sh`` that wastes ``sleep`` seconds first (what the scripted agent removes)."""
    src = root / "heat-fake"
    src.mkdir(parents=True)
    pkg = resources.files("kernforge.testing") / "fakecuda"
    for name in ("fake_app.c", "fake_kernels.c"):
        (src / name).write_bytes((pkg / name).read_bytes())
    run = src / "run.sh"
    run.write_text(f"#!/bin/sh\nsleep {sleep}  # SLOW\nexec ./fake_app \"$@\"\n")
    run.chmod(0o755)
    return src


def write_manifest(path: Path, src: Path, fake: FakeCuda, *, extra: str = "",
                   check: str | None = None, agent: bool = True) -> Path:
    check = check or """
        [check]
        kind = "regex"
        pattern = 'checksum ([0-9.eE+-]+)'
        rel = 1e-12
        """
    agent_line = f'agent = "{{python}} {AGENT}"' if agent else ""
    path.write_text(textwrap.dedent(f"""
        name = "heat-fake"
        source = "{src}"
        build = "sh -c 'cc -O1 -o fake_app fake_app.c -ldl && cc -O1 -fPIC -shared -o kernels.so fake_kernels.c'"
        env = {{ LD_LIBRARY_PATH = "{fake.libdir}" }}
        timeout_s = 120

        [[datasets]]
        name = "small"
        run = "./run.sh {{source}}/kernels.so 10 1000"

        [[datasets]]
        name = "large"
        run = "./run.sh {{source}}/kernels.so 20 4000"
        {check}
        [measure]
        rounds = 2
        e2e_rounds = 3
        min_share = 0.0

        [integrate]
        strategies = ["operator", "tune", "agent"]
        {agent_line}
        """) + extra)
    return path


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


def fused_heat_result(rec: NativeRecording, out_dir: Path, companions: list[dict[str, Any]]
                      ) -> dict[str, Any]:
    """What fused_gpu returns for 3 fused steps of the fake heat unit ``rec`` (its stencil
    recognized as a 1D star), with ``companions`` and an image file written into ``out_dir``:
    the input of ``operator_match.fused_spec`` without a GPU."""
    slots = layout(rec)
    ptrs = [i for i, s in enumerate(slots) if s.pointer]
    w = {(0, 0, 0): 0.5, (0, 0, 1): 0.25, (0, 0, -1): 0.25}
    r = Recognized(ptrs[0], ptrs[1], "float64", (1000, 1, 1), "star", 1, 1, w, "copy")
    (out_dir / "f.cubin").write_bytes(b"\x7fELF a fused image")
    return {"steps": 3, "speedup": 1.5, "ci": [1.4, 1.6], "image": str(out_dir / "f.cubin"),
            "median_original_s": 5e-4, "median_fused_s": 3e-4, "ratios": [1.5],
            "recognized": r.describe(), "cell": "c", "operator": "overlap[steps=3]",
            "checks": ["ok"], "arch": "sm_90", "entry": "kf_fused_1", "grid": [16, 1, 1],
            "block": [64, 1, 1], "shared_mem": 0, "carveout": None,
            "fuse": fz.fuse_field(slots, r, 3), "companions": companions,
            "faces": ["z=0 := 1"]}


def skip_if_busy(out: Path) -> None:
    """Skip the speed claim of an app run that ended INCONCLUSIVE because the machine was busy
    during M4's rounds (documented: a loaded machine measures the load, not the program)."""
    import pytest

    from kernforge.apps.store import AppStore

    store = AppStore.open(out)
    try:
        app = store.app()
    finally:
        store.close()
    if app is not None and app.state == "INCONCLUSIVE" and " was busy" in app.reason:
        pytest.skip(f"the machine was busy: {app.reason[:200]}")
