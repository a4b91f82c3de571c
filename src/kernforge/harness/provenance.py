"""Provenance of every reported figure, figure files, and the idle-device check.

A *figure file* (format ``kernforge-figure``, version 1) holds one reported figure, its raw
samples and its provenance: the command that produced it (argv and working directory),
kernforge version, git revision of the kernforge source (and whether it had local changes),
device, driver, compiler, date, host, Python and numpy versions. ``regenerate`` re-runs the
recorded command: a figure is only as good as the command that reproduces it.

The idle check samples the device's utilisation *before* the canonical re-measurement, while
kernforge itself is idle: the GPU's utilisation through NVML (``pynvml``) or ``nvidia-smi``,
the CPU's from ``/proc/stat`` over 0.2 s. Where neither is available it is skipped, with a
note saying so.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..backends import Backend
from ..core import ConfigError
from .ledger import now, write_json_atomic

FIGURE_FORMAT = "kernforge-figure"
FIGURE_VERSION = 1
BUSY_FRACTION = 0.25


@functools.cache
def git_revision() -> dict[str, Any]:
    """``{"revision", "dirty"}`` of the git checkout holding kernforge's source (None outside
    a checkout)."""
    root = Path(__file__).resolve().parents[3]
    git = shutil.which("git")
    if git is None or not (root / ".git").exists():
        return {"revision": None, "dirty": None}
    try:
        rev = subprocess.run([git, "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False).stdout.strip()
        status = subprocess.run([git, "-C", str(root), "status", "--porcelain",
                                 "--untracked-files=no"], capture_output=True, text=True,
                                timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {"revision": None, "dirty": None}
    return {"revision": rev or None, "dirty": bool(status.strip())}


def provenance(backend: Backend, *, command: Sequence[str] | None = None) -> dict[str, Any]:
    """Where a figure comes from (see the module docstring)."""
    ident = backend.identity()
    return {
        "command": list(command if command is not None else sys.argv),
        "cwd": os.getcwd(),
        "kernforge_version": __version__,
        "git": git_revision(),
        "backend": backend.name,
        "device": ident.get("device"),
        "driver": ident.get("driver"),
        "compiler": ident.get("compiler"),
        "identity": ident,
        "date": now(),
        "host": platform.node(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }


def write_figure(path: str | os.PathLike[str], figure: dict[str, Any],
                 raw: dict[str, Any], prov: dict[str, Any]) -> Path:
    """Write a figure file atomically."""
    out = Path(path)
    write_json_atomic(out, {"format": FIGURE_FORMAT, "version": FIGURE_VERSION,
                            "figure": figure, "raw": raw, "provenance": prov})
    return out


def read_figure(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read figure file {path}: {exc}",
                          hint="give a file written by kernforge (format kernforge-figure)"
                          ) from exc
    if data.get("format") != FIGURE_FORMAT:
        raise ConfigError(f"{path} is not a kernforge figure file",
                          hint="figure files have \"format\": \"kernforge-figure\"")
    return data


def regenerate(path: str | os.PathLike[str], *, timeout: float | None = None
               ) -> subprocess.CompletedProcess[str]:
    """Re-run the command recorded in a figure file, in its recorded working directory."""
    prov = read_figure(path)["provenance"]
    argv = [str(a) for a in prov.get("command") or []]
    if not argv:
        raise ConfigError(f"{path} records no command", hint="it cannot be regenerated")
    if argv[0].endswith(".py"):
        argv = [sys.executable, *argv]
    elif Path(argv[0]).name == "kernforge":
        argv = [sys.executable, "-m", "kernforge", *argv[1:]]
    cwd = prov.get("cwd") or os.getcwd()
    print("regenerating:", shlex.join(argv), f"(in {cwd})", file=sys.stderr)
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          check=False)


# ---- the idle-device check ------------------------------------------------------------------
@dataclass(frozen=True)
class IdleCheck:
    """``idle`` is None when the check could not run (``note`` says why)."""

    idle: bool | None
    utilisation: float | None  # 0..1
    method: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _cpu_busy() -> IdleCheck:
    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)

    try:
        t0, i0 = sample()
        time.sleep(0.2)
        t1, i1 = sample()
    except (OSError, ValueError, IndexError) as exc:
        return IdleCheck(None, None, "skipped", f"/proc/stat unreadable ({exc})")
    busy = 1.0 - (i1 - i0) / max(1, t1 - t0)
    return IdleCheck(busy <= BUSY_FRACTION, busy, "/proc/stat over 0.2 s")


def _nvml_utilisation(bus: str) -> float | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus.encode())
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0
    except Exception:  # noqa: BLE001 - NVML missing or failing: the caller tries nvidia-smi
        return None


def _gpu_busy(backend: Backend) -> IdleCheck:
    props = getattr(backend, "props", {}) or {}
    return gpu_idle(f"{int(props.get('pciDomainID', 0)):08X}:{int(props.get('pciBusID', 0)):02X}:"
                    f"{int(props.get('pciDeviceID', 0)):02X}.0")


def gpu_idle(bus: str) -> IdleCheck:
    """The utilisation of the GPU at PCI ``bus`` (``00000000:1B:00.0``): NVML, else
    nvidia-smi; idle None where neither answers (a driver API replay's device, for one)."""
    nvml = _nvml_utilisation(bus)
    if nvml is not None:
        return IdleCheck(nvml <= BUSY_FRACTION, nvml, "NVML utilization.gpu")
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return IdleCheck(None, None, "skipped", "neither pynvml nor nvidia-smi is available")
    try:
        out = subprocess.run([smi, f"--id={bus}", "--query-gpu=utilization.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=20, check=False).stdout.strip()
        util = float(out.splitlines()[0]) / 100.0
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return IdleCheck(None, None, "skipped", f"nvidia-smi gave no utilisation for {bus}")
    return IdleCheck(util <= BUSY_FRACTION, util, "nvidia-smi utilization.gpu")


_PROBES: dict[str, Callable[[Backend], IdleCheck]] = {
    "cpu": lambda be: _cpu_busy(),
    "cuda": _gpu_busy,
}


def idle_check(backend: Backend) -> IdleCheck:
    """Is the device idle right now? (utilisation at most 25%; see the module docstring)."""
    probe = _PROBES.get(backend.name)
    if probe is None:
        return IdleCheck(None, None, "skipped", f"no idle probe for backend {backend.name!r}")
    return probe(backend)
