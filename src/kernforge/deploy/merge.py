"""Several deployment specs as one: tuned kernels and matched operators deployed together.

Native specs (``deploy/native.py``): each is read (signature and image hashes checked), the
entries are joined, every image is copied beside the new spec under its content hash, and the
result is signed. Two entries that replace the same launch (kernel, geometry and problem key)
cannot both run: the one with the larger evidence speedup is kept (the first on a tie), and
the other is reported. Source-level specs (``deploy/spec.py``) are joined the same way, by
kernel, device and problem.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ConfigError
from . import native as nd
from .spec import DeployEntry
from .spec import read_spec as read_source_spec
from .spec import write_spec as write_source_spec


@dataclass
class Merged:
    path: Path
    entries: int
    dropped: list[str] = field(default_factory=list)  # "<name> from <spec>: why"


def _speedup(e: dict[str, Any]) -> float:
    v = (e.get("evidence") or {}).get("speedup")
    return float(v) if isinstance(v, (int, float)) else 0.0


def _launch_key(e: dict[str, Any]) -> tuple[Any, ...]:
    return (e["kernel"], e.get("source_image"), tuple(e["grid"]), tuple(e["block"]),
            e["shared_mem"], e["key"])


def merge_native_specs(specs: Sequence[Path], out: Path) -> Merged:
    """One signed native spec at ``out`` (images in ``<out stem>.images/``) from ``specs``."""
    if not specs:
        raise ConfigError("no native deployment spec to merge",
                          hint="give at least one spec written by kernforge export")
    chosen: dict[tuple[Any, ...], tuple[dict[str, Any], bytes, Path]] = {}
    dropped: list[str] = []
    for path in specs:
        spec = nd.read_spec(Path(path))
        for e in spec.entries:
            data = spec.image_path(e).read_bytes()
            k = _launch_key(e)
            old = chosen.get(k)
            if old is not None and _speedup(old[0]) >= _speedup(e):
                dropped.append(f"{e['name']} from {path}: the same launch is replaced by the "
                               f"entry from {old[2]} (speedup {_speedup(old[0]):.3f}x >= "
                               f"{_speedup(e):.3f}x)")
                continue
            if old is not None:
                dropped.append(f"{old[0]['name']} from {old[2]}: the same launch is replaced "
                               f"by the entry from {path} (speedup {_speedup(e):.3f}x)")
            chosen[k] = (dict(e), data, Path(path))
    entries, images = [], {}
    for e, data, _ in chosen.values():
        name = hashlib.sha256(data).hexdigest()[:32] + ".bin"
        images[name] = data
        entries.append({**e, "image": name})
    nd.write_spec(out, entries, images)
    nd.read_spec(out)  # what was written reads back, signature and images checked
    return Merged(out, len(entries), dropped)


def merge_source_specs(specs: Sequence[Path], out: Path) -> Merged:
    """One source-level spec (``kernforge-deploy``) at ``out`` from ``specs``."""
    if not specs:
        raise ConfigError("no deployment spec to merge",
                          hint="give at least one spec written by kernforge export")
    chosen: dict[str, tuple[DeployEntry, Path]] = {}
    dropped: list[str] = []
    for path in specs:
        for e in read_source_spec(path).entries:
            k = e.match_key()
            old = chosen.get(k)
            if old is not None and old[0].evidence.speedup >= e.evidence.speedup:
                dropped.append(f"{e.kernel.entry} from {path}: already replaced by the entry "
                               f"from {old[1]}")
                continue
            chosen[k] = (e, Path(path))
    write_source_spec(out, [e for e, _ in chosen.values()])
    return Merged(out, len(chosen), dropped)
