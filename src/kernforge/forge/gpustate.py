"""The GPU's clocks, temperature, power and active throttle reasons, as ``nvidia-smi`` reports
them (None where it is missing or fails): the bench records them before and after each cell, so
that a cell timed slower than the forge measured it can be checked against a lowered clock."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw",
          "clocks_event_reasons.active")
OLD_REASONS = "clocks_throttle_reasons.active"  # the same field under its older name
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
    """The state of the first visible GPU (``CUDA_VISIBLE_DEVICES``' first entry, an index or a
    UUID, else 0; an index assumes CUDA's order is nvidia-smi's, as on identical GPUs)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip() or "0"
    for fields in (FIELDS, (*FIELDS[:-1], OLD_REASONS)):
        try:
            proc = subprocess.run([exe, f"--id={visible}", f"--query-gpu={','.join(fields)}",
                                   "--format=csv,noheader,nounits"], capture_output=True,
                                  text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode == 0 and proc.stdout.strip():
            return parse_query(proc.stdout.splitlines()[0])
    return None
