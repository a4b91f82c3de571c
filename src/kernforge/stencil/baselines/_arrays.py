"""Input arrays of a baseline runner: roles, checks, host copies (no framework imported here)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core import ConfigError
from ..spec import Cell


def input_roles(cell: Cell) -> tuple[str, ...]:
    """The roles a baseline reads: ``in``, plus ``coef`` for varcoeff."""
    return ("in", "coef") if cell.stencil.kind == "varcoeff" else ("in",)


def inputs_by_role(cell: Cell, arrays: Any) -> dict[str, Any]:
    """``arrays`` as role -> array: a mapping with the cell's input roles, or one array (``in``)."""
    found = dict(arrays) if isinstance(arrays, Mapping) else {"in": arrays}
    missing = [r for r in input_roles(cell) if r not in found]
    if missing:
        raise ConfigError(f"{cell.id}: baseline inputs lack {missing}",
                          hint="pass a mapping with 'in' (and 'coef' for varcoeff)")
    out = {r: found[r] for r in input_roles(cell)}
    for role, arr in out.items():
        shape = tuple(int(s) for s in getattr(arr, "shape", ()))
        if shape != cell.shape.array_shape:
            raise ConfigError(f"{cell.id}: input {role!r} has shape {shape}, "
                              f"expected {cell.shape.array_shape}",
                              hint="arrays are (NZ, NY, NX), x contiguous")
        if dtype_name(arr) != cell.precision.dtype.name:
            raise ConfigError(f"{cell.id}: input {role!r} is {dtype_name(arr)}, "
                              f"expected {cell.precision.dtype.name}")
    return out


def dtype_name(arr: Any) -> str:
    """numpy-style dtype name of a numpy, CuPy or torch array (torch: 'float32', ...)."""
    dt = arr.dtype
    return str(dt).removeprefix("torch.") if type(arr).__module__.startswith("torch") \
        else np.dtype(dt).name


def to_host(arr: Any) -> np.ndarray:
    """A C-contiguous numpy copy (or view, for numpy input) of a numpy, CuPy or torch array."""
    mod = type(arr).__module__
    if mod.startswith("cupy"):
        host = arr.get()
    elif mod.startswith("torch"):
        host = arr.detach().cpu().numpy()
    else:
        host = np.asarray(arr)
    return np.ascontiguousarray(host)


def is_device_array(arr: Any) -> bool:
    mod = type(arr).__module__
    if mod.startswith("cupy"):
        return True
    return bool(mod.startswith("torch") and arr.device.type == "cuda")
