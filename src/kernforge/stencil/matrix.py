"""The operator matrix: designs, their parameter spaces, and dispatch from a cell to an operator.

The dispatch table (the user's adopted one when it exists, else the packaged ``data/matrix.json``,
see :func:`table_in_use`; written by the forge loop, see kernforge.forge) holds,
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
from ..core.paths import data_path
from . import designs
from .kernels.common import DoesNotFit, largest_l1
from .operator import Operator
from .spec import Cell

TABLE_PATH = Path(__file__).parent / "data" / "matrix.json"  # the packaged (committed) table
TABLE_VERSION = 1


def user_table() -> Path:
    """The user's own dispatch table (``kernforge stencil adopt`` writes it): matrix.json
    under the data directory (``$KERNFORGE_DATA_DIR``, ``$XDG_DATA_HOME/kernforge`` or
    ``~/.local/share/kernforge``)."""
    return data_path("matrix.json")


def table_in_use() -> Path:
    """The table dispatch reads: the user's when it exists, else the packaged one."""
    mine = user_table()
    return mine if mine.is_file() else TABLE_PATH


def describe_table(path: Path | None = None) -> str:
    """Which table ``path`` (default: the one in use) is, in words, for messages."""
    p = path or table_in_use()
    if Path(p) == TABLE_PATH:
        return f"the packaged table {p}"
    if Path(p) == user_table():
        return f"your adopted table {p} (it takes precedence over the packaged one)"
    return f"the table {p}"

# design name -> generator (the registry's, kept for callers that build one design directly)
DESIGNS: dict[str, Callable[..., Operator]] = {
    name: d.generate for name, d in designs.REGISTRY.items()}


def applicable(cell: Cell) -> list[str]:
    """Designs that can build this cell, the preferred one first (naive last)."""
    return designs.applicable(cell)


def space(design: str, cell: Cell) -> dict[str, tuple[Any, ...]]:
    """Each parameter's values, the default first (the design module declares them)."""
    return designs.get(design).space(cell)


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


def presets(design: str, cell: Cell) -> list[dict[str, Any]]:
    """Parameter sets to try for a cell no search has tuned, best guess first: the design's
    presets where it declares them, else its :func:`defaults`."""
    d = designs.get(design)
    return d.presets(cell) if d.presets is not None else [defaults(design, cell)]


def build(design: str, cell: Cell, params: dict[str, Any]) -> Operator | None:
    """The operator, or None when these parameters do not fit the cell (the generator raised
    :class:`DoesNotFit`: too much shared memory, a vector width that does not divide the row,
    ...). Any other error is a bug and propagates."""
    if design not in DESIGNS:
        raise ConfigError(f"unknown stencil design {design!r}",
                          hint=f"one of {', '.join(DESIGNS)}")
    d = designs.get(design)
    if (cell.stencil.dims != 3 and not d.planar) or (cell.stencil.dims == 3 and d.planar_only):
        return None  # a 3D design does not build a planar stencil, nor a planar one a 3D one
    clean = {k: tuple(v) if isinstance(v, list) else v for k, v in params.items()
             if k != "steps"}
    # the launch attribute, the same for every design that lists it
    l1 = clean.pop("l1", 0) if "l1" in space(design, cell) else 0
    if l1 not in (0, 1):
        return None
    try:
        op = d.generate(cell, **clean)
    except DoesNotFit:
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
    """The persisted dispatch table (cell id -> entry); empty when there is none yet.
    Default: the table in use (the user's adopted one, else the packaged one)."""
    p = path or table_in_use()
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
