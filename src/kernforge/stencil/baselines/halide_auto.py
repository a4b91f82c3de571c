"""Halide scheduled by the Anderson2021 GPU autoscheduler (the algorithm is ``halide_common``).

The plugin ``libautoschedule_anderson2021.so`` is loaded from the halide package's lib directory
(once per process). Its cost model's weights are built into the plugin (``weights_path`` is left
empty). Estimates are the cell's exact extents (set by ``define``: inputs over the grid, the
output over the interior). Parameters (``AUTO_PARAMS``; any may be overridden):

- ``parallelism=132``: the H200's SM count;
- ``beam_size``: 32 (the autoscheduler's default) for single-sweep cells, where the search is
  small (measured on the CPU: under 5 s per cell, box_2 the longest, and the same schedule as a
  greedy search); 1 (greedy) for the temporal cell, where a beam of 32 took 17-26 s per cell
  against about 1 s greedy;
- ``random_dropout=100`` (keep every state) and ``random_dropout_seed=1``: deterministic.

The time spent in ``apply_autoscheduler`` and the schedule it chose (C++ source) are recorded in
the runner's ``info`` (``autoschedule_seconds``, ``schedule``).
"""

from __future__ import annotations

import glob
import os
import time
from typing import Any

from ...core import BackendUnavailableError, KernforgeError
from ..spec import Cell
from .halide_common import (
    CUDA_TARGET,
    HalideRunner,
    build_fixed_or_large,
    define,
    import_halide,
    target_for,
)

AUTOSCHEDULER = "Anderson2021"
AUTO_PARAMS: dict[str, str] = {"parallelism": "132", "beam_size": "32",
                               "random_dropout": "100", "random_dropout_seed": "1"}
TEMPORAL_BEAM = "1"


def params_for(cell: Cell, params: dict[str, str] | None = None) -> dict[str, str]:
    """The Anderson2021 parameters used for ``cell`` (``params`` override them)."""
    merged = dict(AUTO_PARAMS)
    if cell.stencil.temporal:
        merged["beam_size"] = TEMPORAL_BEAM
    merged.update(params or {})
    return merged

_loaded: list[str] = []


def plugin_path() -> str:
    """The Anderson2021 plugin inside the installed halide package."""
    hl = import_halide()
    root = os.path.dirname(hl.__file__)
    for pattern in ("lib*/libautoschedule_anderson2021.*", "**/libautoschedule_anderson2021.*"):
        found = sorted(glob.glob(os.path.join(root, pattern), recursive=True))
        if found:
            return found[0]
    raise BackendUnavailableError(
        "the Anderson2021 autoscheduler plugin is not in the halide package",
        hint=f"expected lib*/libautoschedule_anderson2021.so under {root}")


def load_plugin() -> str:
    """Load the plugin once per process; returns its path."""
    if not _loaded:
        path = plugin_path()
        import_halide().load_plugin(path)
        _loaded.append(path)
    return _loaded[0]


def autoschedule(alg: Any, target: str = CUDA_TARGET,
                 params: dict[str, str] | None = None) -> dict[str, Any]:
    """Apply Anderson2021 to ``alg``'s pipeline for ``target``; returns what it did and took."""
    hl = alg.hl
    load_plugin()
    merged = params_for(alg.cell, params)
    pipeline = hl.Pipeline(alg.output)
    t0 = time.perf_counter()
    try:
        result = pipeline.apply_autoscheduler(hl.Target(target),
                                              hl.AutoschedulerParams(AUTOSCHEDULER, merged))
    except Exception as exc:  # Halide's own error types
        raise KernforgeError(f"{alg.cell.id}: Anderson2021 failed: {exc}",
                             hint="check the estimates and the target") from exc
    return {"autoscheduler": AUTOSCHEDULER, "autoscheduler_params": merged,
            "autoschedule_seconds": time.perf_counter() - t0,
            "schedule": str(result.schedule_source)}


def build(cell: Cell, arrays: Any, *, target: str = CUDA_TARGET,
          params: dict[str, str] | None = None) -> HalideRunner:
    """A runner of the autoscheduled pipeline (scheduled for, and run on, ``target``)."""
    def make(large: bool) -> HalideRunner:
        alg = define(cell, large)
        full = target_for(target, large)
        return HalideRunner("halide_auto", alg, full, arrays, autoschedule(alg, full, params))

    return build_fixed_or_large(cell, make)
