"""Whether a CUDA program can run here: a program of CUDA sources on a machine with no usable
CUDA device fails M1 with whatever its unchecked CUDA calls leave behind (a check that prints
FAIL, a crash), which reads as the program's own failure. ``app run`` refuses it before
building (exit 3) and ``app batch`` leaves it unstarted, so that a batch started on a machine
without a GPU finishes nothing that a GPU machine would then skip as done.

The device is probed in a child process (the driver is never initialized in kernforge's own,
which forks the program's commands), with the program's environment (its
``CUDA_VISIBLE_DEVICES``); ``KERNFORGE_LIBCUDA`` names the driver library as for replay.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from ..core import BackendUnavailableError
from .manifest import Manifest
from .process import plain_env

_PROBE = r"""
import ctypes, sys
try:
    lib = ctypes.CDLL(sys.argv[1])
except OSError as exc:
    print(f"the CUDA driver ({sys.argv[1]}) cannot be loaded: {exc}"); sys.exit(0)
rc = lib.cuInit(0)
if rc:
    print(f"cuInit failed with CUresult {rc} (100: no CUDA-capable device)"); sys.exit(0)
n = ctypes.c_int(0)
rc = lib.cuDeviceGetCount(ctypes.byref(n))
if rc or n.value < 1:
    print(f"the CUDA driver sees no device (cuDeviceGetCount: {n.value}, CUresult {rc})")
"""

_SUFFIXES = (".cu", ".cuh")
_MOST_DIRS = 5000  # a program's directory, not a whole suite: stop after this many directories
_seen: dict[tuple[tuple[str, str], ...], str | None] = {}


def cuda_evidence(manifest: Manifest) -> str | None:
    """Why the program is taken for a CUDA program (its build runs nvcc, a program its
    datasets run holds CUDA device code, or it has CUDA sources), None when nothing says so."""
    if "nvcc" in manifest.build:
        return "its build runs nvcc"
    for d in manifest.datasets:
        argv = d.argv(manifest.source)
        exe = manifest.source / argv[0] if argv and "/" in argv[0] else None
        if exe is not None and exe.is_file() and _has_fatbin(exe):
            return f"{argv[0]} holds CUDA device code"
    for n, (top, dirs, files) in enumerate(os.walk(manifest.source)):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if f.endswith(_SUFFIXES):
                return f"it has CUDA sources ({Path(top, f).relative_to(manifest.source)})"
        if n > _MOST_DIRS:
            break
    return None


def _has_fatbin(exe: Path, most: int = 1 << 28) -> bool:
    """Whether an executable has a ``.nv_fatbin`` section (nvcc's device code; the section's
    name stays in a stripped binary), read in chunks, at most ``most`` bytes."""
    tag, seen, tail = b".nv_fatbin", 0, b""
    try:
        with exe.open("rb") as f:
            if f.read(4) != b"\x7fELF":
                return False
            while seen < most and (chunk := f.read(1 << 20)):
                if tag in tail + chunk:
                    return True
                tail, seen = chunk[-len(tag):], seen + len(chunk)
    except OSError:
        return False
    return False


def missing_device(env: Mapping[str, str]) -> str | None:
    """Why no CUDA device is usable with this environment, None when one is."""
    lib = os.environ.get("KERNFORGE_LIBCUDA") or "libcuda.so.1"
    key = (("", lib), *sorted((k, v) for k, v in env.items()
                              if k.startswith(("CUDA_", "LD_LIBRARY_PATH", "NVIDIA_"))))
    if key not in _seen:
        try:
            out = subprocess.run([sys.executable, "-c", _PROBE, lib], env=dict(env),
                                 capture_output=True, text=True, timeout=60, check=False)
            said = out.stdout.strip() or (f"the device probe exited {out.returncode}: "
                                          f"{out.stderr.strip()[-200:]}" if out.returncode
                                          else "")
        except subprocess.TimeoutExpired:
            said = "the device probe (cuInit) did not return within 60 s"
        _seen[key] = said or None
    return _seen[key]


def gpu_refusal(manifest: Manifest) -> str | None:
    """Why this program cannot run on this machine (a CUDA program, no usable device), or
    None."""
    evidence = cuda_evidence(manifest)
    if evidence is None:
        return None
    env = plain_env()
    env.update(manifest.env)
    why = missing_device(env)
    if why is None:
        return None
    return (f"{manifest.name} is a CUDA program ({evidence}) and no CUDA device is usable "
            f"on this machine: {why}")


def refuse_without_gpu(manifest: Manifest) -> None:
    """BackendUnavailableError (exit 3) for :func:`gpu_refusal`'s reason."""
    why = gpu_refusal(manifest)
    if why is not None:
        raise BackendUnavailableError(why, hint="run it on a machine with an NVIDIA GPU and "
                                                "its driver (nvidia-smi lists the device)")
