"""The operator matrix: designs, their parameter spaces, and dispatch from a cell to an operator.

The dispatch table (``data/matrix.json``, written by the forge loop, see kernforge.forge) holds,
per cell, the accepted design and parameters with the prior-best measurement that the zero-
regression gate compares against. A cell without an entry gets its design's defaults.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.jsonio import DamagedJSON, parse_json
from .kernels import naive, planesweep, temporal, zbox, zmarch, ztile
from .kernels.common import L2_PREFETCH, largest_l1, z_first
from .operator import Operator
from .spec import Cell, Precision

TABLE_PATH = Path(__file__).parent / "data" / "matrix.json"
TABLE_VERSION = 1
# __launch_bounds__ minimum blocks per SM for the box designs and z-marching (values that do not
# fit a block's size are refused by the generator): blocks of 64-512 threads have different
# useful values
MINB = (1, 2, 3, 4, 6, 8, 12, 16)
# z-chunks longer than 128 planes are not offered: whole columns (lz >= the interior; the
# generators clamp lz) ran 1.03-2.1x slower than the incumbents in every 1024^3 cell on the H200
# (docs/stencil/ideas.md): parallelism and the streaming order matter more there
# than the z halo re-read through L2

DESIGNS: dict[str, Callable[..., Operator]] = {
    "naive": naive.generate,
    "zmarch": zmarch.generate,
    "planesweep": planesweep.generate,
    "temporal": temporal.generate,
    "ztile": ztile.generate,
    "zbox": zbox.generate,
}


def applicable(cell: Cell) -> list[str]:
    """Designs that can build this cell, the preferred one first (naive last)."""
    st = cell.stencil
    if st.temporal:
        return ["temporal", "zmarch", "ztile", "naive"]
    if st.kind == "box":
        return ["planesweep", "zbox", "naive"]
    if st.kind == "varcoeff":
        return ["zmarch", "naive"]
    return ["zmarch", "ztile", "planesweep", "naive"]


def _precision_options(cell: Cell, *, cw: bool = True) -> dict[str, tuple[Any, ...]]:
    """Options that exist for one precision only: ``h2`` (fp16 pairs in ``__half2``
    arithmetic) and ``cw`` (fp64 weights in constant memory)."""
    if cell.precision is Precision.FP16:
        return {"h2": (0, 1)}
    if cell.precision is Precision.FP64 and cw:
        return {"cw": (0, 1)}
    return {}


def space(design: str, cell: Cell) -> dict[str, tuple[Any, ...]]:
    """Each parameter's values, the default first."""
    if design == "naive":
        return {"block": ((32, 8, 1), (32, 4, 2), (64, 4, 1), (128, 2, 1))}
    if design == "zmarch":
        vx = {Precision.FP16: (8, 4), Precision.FP32: (4, 2), Precision.FP64: (2, 4)}
        zs: dict[str, tuple[Any, ...]] = {
            "vx": vx[cell.precision], "lz": (64, 32, 128, 16, 8), "ty": (8, 4, 16),
            "tx": (32, 64, 16), "pf": (1, 2, 4), "smem": (0, 1), "xs": (0, 1), "pn": (0, 1),
            "ry": (1, 2, 4), "sc": (0, 1), "minb": MINB, "l1": (0, 1), "zo": (0, 1),
            "l2p": L2_PREFETCH}
        return {**zs, **_precision_options(cell)}
    if design == "ztile":
        widths: dict[Precision, tuple[int, ...]] = {  # 16 bytes at most (fp64: 2 lanes)
            Precision.FP16: (8, 4), Precision.FP32: (4, 2), Precision.FP64: (2,)}
        return {"vx": widths[cell.precision], "lz": (64, 32, 128, 16, 8), "ty": (8, 4, 16),
                "tx": (32, 64, 16), "st": (2, 1, 3, 4), "zo": (0, 1), "ca": (0, 1),
                "l1": (0, 1),  # l1: the largest L1 for ca=1's cached copies
                "l2p": L2_PREFETCH, "sc": (0, 1),  # L2 prefetch, streaming stores
                **_precision_options(cell, cw=False)}  # h2 (fp16)
    if design == "zbox":
        # 16-byte loads at most (ptxas for sm_90, box_1 512^3: fp32 vx=4 46 registers and 44.5
        # instructions per output, vx=2 32 and 57, the plane sweep ~60; fp16 vx=4 42, vx=8 75)
        lanes: dict[Precision, tuple[int, ...]] = {
            Precision.FP16: (4, 8), Precision.FP32: (4, 2), Precision.FP64: (2,)}
        zb: dict[str, tuple[Any, ...]] = {
            "vx": lanes[cell.precision], "lz": (32, 64, 16, 8, 128), "ty": (8, 4, 16),
            "tx": (32, 64, 16), "pn": (1, 0), "pw": (0, 1),
            "minb": MINB, "l1": (0, 1), "zo": (0, 1), "l2p": L2_PREFETCH}
        return {**zb, **_precision_options(cell, cw=False)}  # zbox: fp64 weights always in
        # constant memory (no table entry predates it)
    if design == "planesweep":
        sp: dict[str, tuple[Any, ...]] = {"ry": (4, 2, 8), "lz": (64, 32, 128, 16),
                                          "ty": (4, 8, 2), "vx": (1, 2), "tx": (32, 64),
                                          "minb": MINB, "l1": (0, 1), "zo": (0, 1),
                                          # planes staged by cp.async copies
                                          "st": (0, 2, 1, 3), "ca": (0, 1),
                                          "l2p": L2_PREFETCH, "sc": (0, 1)}
        return {**sp, **_precision_options(cell)}
    if design == "temporal":
        ty = (16, 32) if cell.precision is Precision.FP64 else (32, 16)
        tp: dict[str, tuple[Any, ...]] = {
            "lz": (64, 128, 32, 16, 0), "ty": ty, "tx": (32, 64), "pipe": (1, 0),
            "pf": (1, 2, 3, 4), "cx": (1, 2, 4), "cy": (1, 2), "minb": (1, 2, 3, 4),
            "fs": (0, 2), "zo": (0, 1), "fi": (0, 1)}
        return {**tp, **_precision_options(cell, cw=False)}  # h2 (fp16)
    raise ConfigError(f"unknown stencil design {design!r}", hint=f"one of {', '.join(DESIGNS)}")


TARGET_THREADS = 1 << 18  # about one full wave of the H200 (132 SMs x 2048 threads)


def defaults(design: str, cell: Cell) -> dict[str, Any]:
    """The first value of every parameter, except the z-chunk: the first value, or the longest
    shorter chunk that launches :data:`TARGET_THREADS` threads, so thin and small
    grids get enough parallelism (the first forge run on the H200 lost every 2048x64x64 cell
    to the naive kernel for want of blocks)."""
    params = {k: v[0] for k, v in space(design, cell).items()}
    if "lz" not in params:
        return params
    best = None
    first = params["lz"]
    for lz in sorted((v for v in space(design, cell)["lz"] if 0 < v <= first), reverse=True):
        op = build(design, cell, {**params, "lz": lz})
        if op is None:
            continue
        (gx, gy, gz), (bx, by, bz) = op.launches[0].grid, op.launches[0].block
        best = lz
        if gx * gy * gz * bx * by * bz >= TARGET_THREADS:
            break
    if best is not None:
        params["lz"] = best
    return params


def build(design: str, cell: Cell, params: dict[str, Any]) -> Operator | None:
    """The operator, or None when these parameters do not fit the cell (too much shared
    memory, a vector width that does not divide the row, ...)."""
    if design not in DESIGNS:
        raise ConfigError(f"unknown stencil design {design!r}",
                          hint=f"one of {', '.join(DESIGNS)}")
    clean = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()
             if k != "steps"}
    names = space(design, cell)
    # launch attributes, the same for every design that lists them
    l1 = clean.pop("l1", 0) if "l1" in names else 0
    zo = clean.pop("zo", 0) if "zo" in names else 0
    if l1 not in (0, 1) or zo not in (0, 1):
        return None
    try:
        op = DESIGNS[design](cell, **clean)
        if zo:
            op = z_first(op)
    except ValueError:
        return None
    if l1:
        op = largest_l1(op)
    if any(b[0] * b[1] * b[2] > 1024 for b in (launch.block for launch in op.launches)):
        return None
    return op


_KEY = re.compile(r"(\w+)\[([^\]]*)\]")
_ITEM = re.compile(r"\s*(\w+)=(-?\d+|\(\s*\d+(?:\s*,\s*\d+)*\s*\))\s*(?:,|$)")


def from_key(cell: Cell, key: str) -> Operator:
    """The operator of ``cell`` whose key is ``key`` (``DESIGN[k=v,...]``, integer or tuple
    values, as the forge and the bench print it), any design. A key leaves out the parameters at
    their first value (the behaviour before the parameter existed: the design's default, except
    e.g. the temporal kernel's ``pipe=0``), so the operator whose parameters are exactly the
    key's is looked for among the defaults and their one-parameter variations; a
    :class:`ConfigError` when none is."""
    m = _KEY.fullmatch(key.strip())
    if m is None:
        raise ConfigError(f"{key!r} is not an operator key", hint="DESIGN[k=v,...], e.g. "
                          "planesweep[ca=1,lz=28,ry=8,st=1,tx=64,ty=4,vx=2]")
    items, pos, body = list(_ITEM.finditer(m.group(2))), 0, m.group(2)
    for it in items:
        pos = it.end() if it.start() == pos else -1
    if pos != len(body) and body.strip():
        raise ConfigError(f"{key!r}: parameters are k=v with integer (or tuple) values",
                          hint="copy the key as the forge or the bench printed it")
    over: dict[str, Any] = {it.group(1): tuple(int(x) for x in it.group(2).strip("()").split(","))
                            if it.group(2).startswith("(") else int(it.group(2)) for it in items}
    design = m.group(1)
    names = space(design, cell)  # ConfigError: an unknown design
    unknown = sorted(set(over) - set(names) - {"steps"})
    if unknown or len(over) != len(items):
        raise ConfigError(f"{key!r}: {design} has no parameter {', '.join(unknown)}" if unknown
                          else f"{key!r}: a parameter named twice",
                          hint=f"{design}'s parameters: {', '.join(sorted(names))}")
    base = defaults(design, cell)
    tries = [base, *({**base, k: v} for k, vals in names.items() if k not in over
                     for v in vals if v != base.get(k))]
    first = None
    for params in tries:
        try:
            op = build(design, cell, {**params, **over})
        except (TypeError, IndexError) as exc:  # a value of the wrong shape (a tuple for an int)
            raise ConfigError(f"{key!r}: {exc}", hint="copy the key as the forge or the bench "
                              "printed it") from None
        if op is None:
            continue
        first = first or op
        if {k: tuple(v) if isinstance(v, list) else v for k, v in op.params.items()} == over:
            return op
    if first is None:
        raise ConfigError(f"{key!r}: {design} does not build {cell.id} with {over}",
                          hint="a key printed for this cell, or parameters that fit its grid")
    raise ConfigError(f"{key!r}: that builds {first.key} for {cell.id}",
                      hint="name every parameter the key shows")


def source_sha(op: Operator) -> str:
    return hashlib.sha256(op.source.encode()).hexdigest()[:16]


def read_table(p: Path) -> dict[str, Any]:
    """A dispatch table file as written (version checked; entries not resolved)."""
    try:
        data = parse_json(p.read_text("utf-8"))
    except (DamagedJSON, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: {exc}",
                          hint="restore it from git or delete it to start from defaults") from None
    version = data.get("version") if isinstance(data, dict) else None
    if version != TABLE_VERSION:
        raise ConfigError(f"{p} has version {version!r}, expected {TABLE_VERSION}",
                          hint="regenerate it with the forge loop")
    return data


def load_table(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The persisted dispatch table (cell id -> entry); empty when there is none yet."""
    p = path or TABLE_PATH
    return table_entries(read_table(p)) if p.exists() else {}


def table_entries(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A table file's entries as dispatch reads them (provisional ones resolved)."""
    cells: dict[str, dict[str, Any]] = {}
    for cid, entry in data.get("cells", {}).items():
        if isinstance(entry, dict) and "provisional" in entry:
            # a seeded forge run ended before its final pass: its operator was never compared
            # with the one it would replace, so the entry from before that run stands
            entry = (entry["provisional"] or {}).get("original")
            if entry is None:
                continue
        cells[cid] = entry
    return cells


def operator_for(cell: Cell, table: dict[str, dict[str, Any]] | None = None) -> Operator:
    """Dispatch: the table's accepted operator for the cell, else the preferred design's
    defaults (falling back to naive)."""
    entries = load_table() if table is None else table
    entry = entries.get(cell.id)
    if entry is not None:
        op = build(entry["design"], cell, entry["params"])
        if op is not None:
            return op
    for design in applicable(cell):
        op = build(design, cell, defaults(design, cell))
        if op is not None:
            return op
    raise ConfigError(f"no design builds {cell.id}", hint="check the cell's shape")
