"""The generated CUDA of every dispatch-table entry, pinned: an emitter or generator change that
alters one byte of a table operator's source (or its launches) fails here. The table's
figures were measured on those exact sources; a changed entry must be benched again before
its new pin is written:

    python tests/stencil/test_source_pins.py --write    # after the re-bench, with its numbers

Also pinned: every applicable design's default operator of every cell (what dispatch builds
for a cell without an entry, and the forge's starting points).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from kernforge.stencil import matrix as mx
from kernforge.stencil.operator import Operator
from kernforge.stencil.spec import matrix

PINS = Path(__file__).resolve().parents[1] / "data" / "stencil" / "source-pins.json"


def fingerprint(op: Operator) -> dict[str, Any]:
    launches = [[la.entry, list(la.grid), list(la.block), list(la.args), la.shared_bytes,
                 la.carveout] for la in op.launches]
    return {"key": op.key, "source_sha256": hashlib.sha256(op.source.encode()).hexdigest(),
            "launches": launches, "options": list(op.options)}


def fingerprints() -> dict[str, dict[str, Any]]:
    cells = {c.id: c for c in matrix()}
    out: dict[str, dict[str, Any]] = {}
    for cid, entry in sorted(mx.load_table().items()):
        op = mx.build(entry["design"], cells[cid], entry["params"])
        assert op is not None, f"{cid}: the table's entry no longer builds"
        out[f"table {cid}"] = fingerprint(op)
    for cid, cell in sorted(cells.items()):
        for design in mx.applicable(cell):
            op = mx.build(design, cell, mx.defaults(design, cell))
            if op is not None:
                out[f"default {cid} {design}"] = fingerprint(op)
    return out


@pytest.fixture(scope="module")
def now() -> dict[str, dict[str, Any]]:
    return fingerprints()


def test_every_table_entry_generates_its_pinned_source(now: dict[str, dict[str, Any]]) -> None:
    pinned = json.loads(PINS.read_text())
    changed = sorted(k for k in pinned if now.get(k) != pinned[k])
    added = sorted(set(now) - set(pinned))
    assert not changed and not added, (
        f"{len(changed)} operators changed ({changed[:5]}), {len(added)} new ({added[:5]}): "
        "bench the changed table entries again, then rewrite the pins (module docstring)")


def test_the_table_records_the_source_it_was_measured_on(now: dict[str, dict[str, Any]]) -> None:
    """Each entry's ``source_sha`` (written by the forge when it measured the operator) is the
    prefix of the source generated now."""
    for cid, entry in mx.load_table().items():
        assert now[f"table {cid}"]["source_sha256"].startswith(entry["source_sha"]), cid


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/stencil/test_source_pins.py --write")
    PINS.write_text(json.dumps(fingerprints(), indent=0, sort_keys=True) + "\n")
    print(f"wrote {PINS}")
