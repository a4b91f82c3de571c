"""Kernels and manifest-editing helpers shared by the recording tests."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernforge.record.format import manifest_checksum

AXPY = '''
def axpy(x: "const double *", y: "double *", a: "double", n: "int") -> None:
    y[:n] = a * x[:n] + y[:n]
'''

# u is read only, out is written, flag (an int array) is passed but never changed
HEAT = '''
def heat_step(u: "const float *", out: "float *", flag: "int *", alpha: "float",
              n: "int") -> None:
    out[1:n-1] = u[1:n-1] + alpha * (u[:n-2] - 2 * u[1:n-1] + u[2:n])
    out[0] = u[0]
    out[n-1] = u[n-1]
'''


def edit_manifest(unit: Path, change: Callable[[dict[str, Any]], None],
                  *, fix_checksum: bool = True) -> None:
    path = unit / "manifest.json"
    m = json.loads(path.read_text())
    change(m)
    if fix_checksum:
        m["checksum"] = manifest_checksum(m)
    path.write_text(json.dumps(m, indent=2))


def copy_unit(unit: Path, dest: Path) -> Path:
    return Path(shutil.copytree(unit, dest / unit.name))
