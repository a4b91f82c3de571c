"""The GPU's clocks, temperature, power and active throttle reasons, as ``nvidia-smi`` reports
them (None where it is missing or fails): the bench records them before and after each cell, so
that a cell timed slower than the forge measured it can be checked against a lowered clock."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw",
          "clocks_throttle_reasons.active")
KEYS = ("sm_mhz", "mem_mhz", "temperature_c", "power_w", "throttle_reasons")


def parse_query(line: str) -> dict[str, Any] | None:
    """One CSV line of ``nvidia-smi --query-gpu=FIELDS --format=csv,noheader,nounits``."""
    parts = [p.strip() for p in line.strip().split(",")]
    if len(parts) != len(FIELDS):
        return None
    out: dict[str, Any] = {}
    for key, value in zip(KEYS, parts, strict=True):
        if key == "throttle_reasons":
            out[key] = value  # a bit mask, e.g. 0x0000000000000000 (none)
            continue
        try:
            out[key] = float(value)
        except ValueError:
            out[key] = None  # "[N/A]"
    return out


def gpu_state() -> dict[str, Any] | None:
    """The state of the first visible GPU (``CUDA_VISIBLE_DEVICES``' first entry, else 0)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    try:
        proc = subprocess.run([exe, f"--id={visible}", f"--query-gpu={','.join(FIELDS)}",
                               "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_query(proc.stdout.splitlines()[0]) if proc.returncode == 0 and \
        proc.stdout.strip() else None
