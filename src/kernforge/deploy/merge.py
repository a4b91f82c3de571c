"""Several deployment specs as one: tuned kernels and matched operators deployed together.

Native specs (``deploy/native.py``): each is read (signature and image hashes checked), the
entries are joined, every image is copied beside the new spec under its content hash, and the
result is signed. Two entries that replace the same launch (kernel, geometry and problem key)
cannot both run: the one with the larger evidence speedup is kept (the first on a tie), and
the other is reported (a fused entry keeps its one-launch replacement, :mod:`.native_unfused`).
:func:`merge_one_launch` gives a fused spec's entries the one-launch entries of another spec
for the same launches. Source-level specs (``deploy/spec.py``) are joined the same way, by
kernel, device and problem.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ConfigError
from . import native as nd
from . import native_unfused
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
    chosen: dict[tuple[Any, ...], tuple[dict[str, Any], nd.NativeSpec]] = {}
    dropped: list[str] = []
    for path in specs:
        spec = nd.read_spec(Path(path))
        for e in spec.entries:
            k = _launch_key(e)
            old = chosen.get(k)
            if old is not None and _speedup(old[0]) >= _speedup(e):
                dropped.append(f"{e['name']} from {path}: the same launch is replaced by the "
                               f"entry from {old[1].path} (speedup {_speedup(old[0]):.3f}x >= "
                               f"{_speedup(e):.3f}x)")
                continue
            if old is not None:
                dropped.append(f"{old[0]['name']} from {old[1].path}: the same launch is "
                               f"replaced by the entry from {path} (speedup "
                               f"{_speedup(e):.3f}x)")
            chosen[k] = (dict(e), spec)
    images: dict[str, bytes] = {}
    entries = [_rehomed(spec, e, images) for e, spec in chosen.values()]
    nd.write_spec(out, entries, images)
    nd.read_spec(out)  # what was written reads back, signature and images checked
    return Merged(out, len(entries), dropped)


def _rehomed(spec: nd.NativeSpec, e: dict[str, Any], images: dict[str, bytes]
             ) -> dict[str, Any]:
    """``e`` of ``spec`` with its images (a fused entry's one-launch replacement's too) added
    to ``images`` under their content hash, and named so."""
    def own(part: Mapping[str, Any]) -> dict[str, Any]:
        data = spec.image_path(part).read_bytes()
        name = hashlib.sha256(data).hexdigest()[:32] + ".bin"
        images[name] = data
        return {**part, "image": name}

    new = own(e)
    one = (e.get("fuse") or {}).get("one_launch")
    if one is not None:
        new["fuse"] = {**e["fuse"], "one_launch": own(one)}
    return new


def merge_one_launch(fused: Path, one: Path) -> tuple[Path, str]:
    """The fused spec ``fused`` with each fused entry given the one-launch entry of spec
    ``one`` that replaces the same launch, for the launches the interposer holds but runs
    unfused (:mod:`.native_unfused`), written beside it (``<stem>-one-launch.json``); and what
    those launches run. The fused spec itself when none pairs or a spec cannot be read."""
    try:
        fspec, ospec = nd.read_spec(fused), nd.read_spec(one)
    except ConfigError as exc:
        return fused, f"the original kernel (no one-launch replacement: {exc})"
    images: dict[str, bytes] = {}
    ones = [_rehomed(ospec, dict(e), images) for e in ospec.entries]
    entries, n = native_unfused.paired([_rehomed(fspec, dict(e), images)
                                        for e in fspec.entries], ones)
    if not n:
        return fused, ("the original kernel (the one-launch spec replaces another launch: "
                       "its " + ", ".join(native_unfused.SAME_LAUNCH) + " differ)")
    used = {p["image"] for e in entries for p in native_unfused.parts(e)}
    out = fused.with_name(f"{fused.stem}-one-launch.json")
    nd.write_spec(out, entries, {k: v for k, v in images.items() if k in used})
    nd.read_spec(out)  # what was written reads back, signature and images checked
    return out, f"the one-launch operator ({one})"


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
