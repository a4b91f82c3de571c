"""Pair rounds: candidates that change two parameters of the incumbent at once.

The forge changes one thing per round, so it climbs one parameter at a time and stops where
every single change is slower, although two together may be faster: a shorter z-chunk (more
blocks in flight) may pay only with narrower vectors, loads one plane ahead only with fewer
rows per block. On the H200 the one incumbent of a box_2 fp32 cell that reached 89% of its
roofline got there by two changes in separate rounds (``pn=0``, then ``pw=1``), while the
four other box_2 fp32 cells sit at 58-77%.

A pair round offers the incumbent with two of its design's ``paired`` knobs changed (each to any other
value of the design's space), at most :data:`PAIR_LIMIT` per cell, drawn in an order fixed by
the cell's id, so a rerun offers the same candidates; ``pairs2`` offers the next
:data:`PAIR_LIMIT` of that order (a cell whose incumbent ``pairs`` left unchanged gets new
candidates: of the 75 single-sweep cells of the committed table at the time, 22 have at
most 40 pair candidates and all 75 at most 80, so the two pages offer each cell's whole pair
space). The gate is the same as every round's: the
fastest of the screened candidates must pass the oracle and beat the incumbent in the
interleaved comparison (median >= 1 + band, bootstrap interval above 1), which guards against
picking a lucky screening time out of many.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

from ..stencil import designs
from ..stencil import matrix as mx
from ..stencil.operator import Operator
from ..stencil.spec import Cell

PAIR_LIMIT = 40


def pair_candidates(cell: Cell, design: str, params: dict[str, Any],
                    exclude: set[str] | None = None,
                    limit: int = PAIR_LIMIT, skip: int = 0) -> list[Operator]:
    """The incumbent ``design``/``params`` with two parameters changed, distinct operators
    only, none of the keys in ``exclude`` (the incumbent's own); the first ``skip`` of them
    left out (a later page of the same order)."""
    space = mx.space(design, cell)
    moves = [(k, v) for k in designs.get(design).paired if k in space
             for v in space[k] if params.get(k, space[k][0]) != v]
    combos = [(a, b) for i, a in enumerate(moves) for b in moves[i + 1:] if a[0] != b[0]]
    random.Random(zlib.crc32(cell.id.encode())).shuffle(combos)
    keys = set(exclude or ())
    ops: list[Operator] = []
    for (k1, v1), (k2, v2) in combos:
        op = mx.build(design, cell, {**params, k1: v1, k2: v2})
        if op is not None and op.key not in keys:
            keys.add(op.key)
            ops.append(op)
            if len(ops) >= skip + limit:
                break
    return ops[skip:]
