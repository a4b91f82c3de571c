"""Public baselines of the operator matrix: PyTorch conv3d and Halide (hand and autoscheduled).

A baseline is built as a *runner* for one cell from its input arrays (see docs/stencil-baselines.md):

- ``name``; ``run()`` applies the stencil once (all steps of a temporal cell);
- ``synchronous``: False when ``run()`` only enqueues on the current CUDA stream (torch),
  True when it returns after the work is done (Halide: its own CUDA context; time it with the
  wall clock around ``run()``);
- ``output_region``: ``"interior"`` for all three (shape ``(nz-2r, ny-2r, nx-2r)``);
- ``output()``: the last result as a host numpy array;
- ``info``: what was built (schedule, compile and autoschedule seconds, ...).

Frameworks are imported only when a runner is built; a missing one raises
:class:`~kernforge.core.BackendUnavailableError` with a hint.
"""

from __future__ import annotations

import ctypes
import importlib.util
from typing import Any

from ...core import BackendUnavailableError, ConfigError
from ..spec import Cell

NAMES = ("torch", "halide", "halide_auto")


def _cuda_driver() -> str | None:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1) on this machine"
    return None


def available(device: str = "cuda") -> dict[str, str | None]:
    """Baseline name -> None if it can run on ``device`` ("cuda" or "cpu") here, else why not.

    Cheap: checks that the packages can be found (and, for "cuda", that torch is a CUDA build
    seeing a GPU and that the CUDA driver loads); nothing is compiled.
    """
    out: dict[str, str | None] = {}
    if importlib.util.find_spec("torch") is None:
        out["torch"] = "torch is not installed (pip install torch)"
    elif device == "cuda":
        import torch

        out["torch"] = None if torch.cuda.is_available() else \
            "torch sees no CUDA device (a CPU build, or no GPU)"
    else:
        out["torch"] = None
    if importlib.util.find_spec("halide") is None:
        reason: str | None = "halide is not installed (pip install halide==21.0.0)"
    else:
        reason = _cuda_driver() if device == "cuda" else None
    out["halide"] = reason
    if reason is None:
        from .halide_auto import plugin_path

        try:
            plugin_path()
        except BackendUnavailableError as exc:
            reason = exc.message
    out["halide_auto"] = reason
    return out


def make_runner(name: str, cell: Cell, device_arrays: Any, **options: Any) -> Any:
    """A runner of baseline ``name`` for ``cell`` over ``device_arrays``.

    ``device_arrays``: a mapping role -> array with ``in`` (and ``coef`` for varcoeff), or the
    ``in`` array alone; CuPy arrays, torch tensors, or numpy arrays (CPU: torch runs on the CPU;
    give the Halide baselines ``target="host"``). Options: ``target`` (Halide, default
    ``host-cuda-cuda_capability_86``), ``schedule`` (``halide``: a ``HandSchedule``),
    ``params`` (``halide_auto``: Anderson2021 parameters), ``warmup`` (torch).
    """
    if name == "torch":
        from .torch_conv import TorchConvRunner

        return TorchConvRunner(cell, device_arrays, **options)
    if name == "halide":
        from . import halide_hand

        return halide_hand.build(cell, device_arrays, **options)
    if name == "halide_auto":
        from . import halide_auto

        return halide_auto.build(cell, device_arrays, **options)
    raise ConfigError(f"unknown baseline {name!r}", hint=f"choose one of {', '.join(NAMES)}")


__all__ = ["NAMES", "available", "make_runner"]
