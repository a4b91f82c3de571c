"""Compile a forge round's candidates on this machine into the forge's nvcc cache, so a later
``kernforge stencil forge --build nvcc`` on the GPU machine finds them built (the default
``--build nvrtc`` builds on the GPU machine and needs none of this).

    kernforge stencil precompile --changes pairs2 --cache CACHE [--stencils ...]

Only the first round's candidates follow from the table before the run (later rounds start
from its winners), so this compiles those and every incumbent (the final pass builds them
again); for ``tpe``, the first of its three batches (its studies are seeded by the cell's id
and no time is known yet: the same operators the GPU run asks for). The cache is keyed by
source, options and architecture (``forge.compile``); a cubin built by this machine's nvcc runs
on the GPU machine's driver when that driver is as new or newer. Point the forge at it with
``KERNFORGE_CACHE_DIR`` (the cache is its ``cubins`` folder).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..stencil.matrix import TABLE_PATH
from ..stencil.spec import Cell, matrix
from .bo import first_batch
from .compile import compile_all
from .ideas import known, names, tpe_seed
from .loop import Forge, _candidates
from .run import default_compiler


def _no_sessions(cell: Cell) -> Any:
    raise AssertionError("precompiling measures nothing")


def run(changes: str, cache: Path, *, stencils: list[str] | None = None,
        shapes: list[str] | None = None, precisions: list[str] | None = None,
        table: Path = TABLE_PATH, seed_design: str | None = None,
        jobs: int | None = None) -> int:
    """Compile the first round of ``changes`` (the forge run's ``--changes``) and every
    incumbent of ``table`` into ``cache``; ``jobs``: parallel nvcc (default: cores)."""
    change = changes.split(",")[0]
    if not known(change):
        raise ConfigError(f"unknown forge change {change!r}", hint=f"one of {names()}")
    cells = matrix(stencils, shapes, precisions)
    # the run's own start: the table's incumbents (naive where a cell has none or its entry
    # no longer builds), seeded cells at the seed design's defaults
    forge = Forge(cells, table, Path(os.devnull), default_compiler(cache),
                  _no_sessions, seed_design=seed_design)
    ops = []
    seed = tpe_seed(change)
    for cell in cells:
        inc = forge.incumbents[cell.id]
        ops.append(forge._op(cell))
        ops.extend(first_batch(cell, inc.design, inc.params, seed)
                   if seed is not None else _candidates(cell, inc, change))
    t0 = time.time()
    unique = list({(op.cell_id, op.key): op for op in ops}.values())
    print(f"{change}: compiling {len(unique)} operators into {cache}", flush=True)
    built = compile_all(unique, cache, jobs=jobs)  # a KernforgeError without nvcc
    failed = [b for b in built if not b.ok]
    size = sum(p.stat().st_size for p in cache.glob("*.cubin"))
    print(f"{len(built) - len(failed)} compiled, {len(failed)} failed, {time.time() - t0:.0f} s; "
          f"cache {size / 2**20:.1f} MiB")
    for b in failed[:5]:  # a candidate that does not compile is the forge's to reject
        print(f"  {b.op.key}: {b.log.strip().splitlines()[-1] if b.log.strip() else '?'}")
    return 0

