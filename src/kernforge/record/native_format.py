"""Recording format v2 (native units): spool finalization, writing and reading.

The driver interposer writes each recorded launch as a *spool unit* under
``<root>/.spool/<pid>-<seq>/`` (``unit.json``, ``params.bin``, ``r<i>.pre``/``r<i>.post``) and
each module image once under ``<root>/.spool/images/``; a spool unit appears by an atomic rename
only when complete, so a killed application leaves only complete ones. :func:`finalize_spool`
turns each into a recording unit ``<root>/<name>-<n>/`` (manifest.json + content-addressed
blobs, written atomically like v1 units) and removes it; :func:`drop_spent_counts` then removes
the counts a finished run left beside them (and the spool once empty). See
docs/recording-format.md and docs/recording-native.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..backends.cxx_names import short_name
from ..core import KernforgeError, RecordingError, RecordingFormatError
from ..core.jsonio import DamagedJSON, parse_json
from ..core.native import (
    ALLOC_KINDS,
    FuncAttrs,
    NativeParam,
    NativeRecording,
    NativeRegion,
    NativeSource,
)
from ._layout import (
    FORMAT,
    MANIFEST,
    TMP_PREFIX,
    PathLike,
    fsync_dir,
    manifest_checksum,
    no_such_unit,
    recordings_root_error,
)
from .format import _BlobStore, _make_loader, _next_instance, _publish, check_blob_files
from .native_sequence import SEQUENCE_SCHEMA, load_steps, sequence_json, sequence_timing
from .native_timing import AppTimes, app_times, unit_timing
from .spool_read import (
    JSON_LIMIT,
    SPOOL,
    damaged,
    read_regular,
    read_unit_json,
    real_dir,
    spool_dir,
)

NATIVE_SCHEMA = 2
_REWRITE = "re-record the launch (kernforge record -- COMMAND)"


def _bad(path: Path, problem: str) -> RecordingFormatError:
    return RecordingFormatError(f"{path}: {problem}", hint=_REWRITE)


def _pointer_words(raw: bytes, params: list[dict[str, Any]],
                   regions: list[dict[str, Any]]) -> list[list[list[int]]]:
    """Per parameter, [offset, region] of each 8-byte word that points into a region."""
    out: list[list[list[int]]] = []
    for p in params or [{"offset": 0, "size": len(raw)}]:
        words = []
        start = (p["offset"] + 7) // 8 * 8
        for off in range(start, p["offset"] + p["size"] - 7, 8):
            v = int.from_bytes(raw[off:off + 8], "little")
            for i, r in enumerate(regions):
                if r["address"] <= v < r["address"] + r["size"]:
                    words.append([off, i])
                    break
        out.append(words)
    return out


def _raw(path: Path, size: int | None = None) -> np.ndarray:
    return np.frombuffer(read_regular(path, size), dtype=np.uint8)


def _nvrtc_source(spool_unit: Path, entry: str) -> dict[str, Any] | None:
    """The NVRTC program the kernel's image was compiled from (nvrtc.json), as the manifest's
    ``source``: the code, headers, options and the name expression lowered to ``entry``."""
    path = spool_unit / "nvrtc.json"
    if not os.path.lexists(path):
        return None
    try:
        n = parse_json(read_regular(path, limit=JSON_LIMIT).decode("utf-8"))  # kf_put_str: UTF-8
    except (ValueError, UnicodeDecodeError) as exc:  # DamagedJSON is a ValueError
        raise damaged(spool_unit, f"nvrtc.json: {exc}") from None
    if not isinstance(n, dict) or not isinstance(n.get("source"), str):
        raise damaged(spool_unit, "nvrtc.json: not an NVRTC program with its source")
    exprs = [e for e in n.get("name_expressions", []) if e.get("expression")]
    named = next((e["expression"] for e in exprs if e.get("lowered") == entry), None)
    code = n["source"]
    return {"origin": "nvrtc", "code": code,
            "code_sha256": hashlib.sha256(code.encode("utf-8")).hexdigest(),
            "options": n.get("options", []), "headers": n.get("headers", []),
            "name_expression": named, "name_expressions": exprs,
            "output": n.get("output", "cubin"), "library": n.get("library", ""),
            "compiler_version": n.get("nvrtc_version", [0, 0]),
            "program": n.get("program") or ""}


def _convert(spool_unit: Path, root: Path, app: AppTimes) -> Path:
    u = read_unit_json(spool_unit)
    raw = read_regular(spool_unit / "params.bin", u["param_bytes"])
    if u.get("image") is None:
        raise RecordingError(f"{spool_unit.name}: the kernel's module image was not seen",
                             hint="the module was loaded before the interposer was active")
    if not real_dir(spool_unit.parent / "images"):
        raise damaged(spool_unit, "the spool's images directory is missing or not a directory")
    image = spool_unit.parent / "images" / f"{u['image']}.bin"
    tmp = root / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        store = _BlobStore(tmp)
        regions = []
        for i, r in enumerate(u["regions"]):
            pre = store.save(_raw(spool_unit / f"r{i}.pre", r["size"]))
            post = spool_unit / f"r{i}.post"
            regions.append({"address": r["address"], "size": r["size"],
                            "kind": ALLOC_KINDS[r["kind"]] if 0 <= r["kind"] < 5 else "alloc",
                            "prologue": pre,
                            "epilogue": store.save(_raw(post, r["size"])) if r.get("changed")
                            else None})
        image_id = store.save(_raw(image))
        seq = sequence_json(u, spool_unit, store.save, _pointer_words) \
            if u["version"] == 2 else None
        fsync_dir(store.dir)
        params = u["params"]
        pointers = _pointer_words(raw, params, u["regions"])
        entry = u["function"]
        manifest: dict[str, Any] = {
            "format": FORMAT, "schema_version": NATIVE_SCHEMA, "kind": "native",
            "kernforge_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="microseconds"),
            "backend": "driver",
            "identity": {k: u[k] for k in ("device", "driver_version", "compute_capability",
                                            "device_ordinal") if k in u},
            "kernel": {"entry": entry, "name": short_name(entry), "image": image_id,
                       "image_kind": u.get("image_kind", ""), "loaded_via": u.get("loaded_via", "")},
            "launch": {"grid": u["grid"], "block": u["block"], "shared_mem": u["shared_mem"],
                       "api": u["api"], "attrs": u.get("launch_attrs", []),
                       **({"func_attrs": u["func_attrs"]} if "func_attrs" in u else {})},
            "params": {"bytes": raw.hex(),
                       "layout": [{"offset": p["offset"], "size": p["size"], "pointers": w}
                                  for p, w in zip(params or [{"offset": 0, "size": len(raw)}],
                                                  pointers)]},
            "regions": regions,
            "capture": {"origin": "driver",
                        **(unit_timing(u, app) if seq is None else sequence_timing(u)),
                        "call": u.get("call"),
                        "pid": u.get("pid"), "stream": u.get("stream")},
            "instance": 0, "blobs": store.index,
        }
        if seq is not None:
            manifest["schema_version"], manifest["sequence"] = SEQUENCE_SCHEMA, seq
        source = _nvrtc_source(spool_unit, entry)
        if source is not None:
            manifest["source"] = source
        name = _unit_name(entry)
        manifest["kernel"]["unit_name"] = name
        return _publish(tmp, root, manifest, _next_instance(root, name), name=name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _unit_name(entry: str) -> str:
    """A directory-safe unit name: the last part of the readable name, cut to 80 characters."""
    s = "".join(c if c.isalnum() or c in "_." else "_" for c in short_name(entry).split("::")[-1])
    return (s or "kernel")[:80]


def finalize_spool(root: PathLike) -> tuple[list[Path], list[str]]:
    """Turn every complete spool unit under ``root`` into a recording unit (and remove it).
    Returns the new units and a problem line (``NAME: reason``) for each spool entry that
    could not be turned: a damaged unit (kept in the spool, for a look), a name that is not a
    directory, a unit a killed process left incomplete (removed once nothing else is left)."""
    root = Path(root)
    try:
        spool = spool_dir(root)
    except RecordingFormatError as exc:
        return [], [str(exc)]
    if spool is None:
        return [], []
    units, problems = [], []
    app = app_times(spool_summaries(root))
    for d in sorted(spool.iterdir()):
        if not d.name[:1].isdigit():
            if d.name.startswith(TMP_PREFIX) and real_dir(d) and not d.name.startswith(
                    f"{TMP_PREFIX}w"):
                problems.append(f"{d.name}: incomplete: its process ended (killed?) while "
                                "writing it; skipped")
            continue
        if not real_dir(d):
            problems.append(f"{d.name}: not a directory (a symbolic link, file or FIFO); "
                            "skipped")
            continue
        try:
            units.append(_convert(d, root, app))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, KernforgeError) as exc:
            problems.append(str(exc) if isinstance(exc, RecordingFormatError) and
                            exc.message.startswith(d.name) else f"{d.name}: {exc}")
            continue
        shutil.rmtree(d, ignore_errors=True)
    if not any(p.name[:1].isdigit() for p in spool.iterdir()):
        for p in [spool / "images", *spool.glob(f"{TMP_PREFIX}*")]:  # a killed writer's
            if real_dir(p):  # rmtree would open (and block on) a FIFO planted there
                shutil.rmtree(p, ignore_errors=True)
            elif os.path.lexists(p):
                p.unlink(missing_ok=True)
    return units, problems


def spool_entries(root: PathLike) -> set[str]:
    """The names the spool under ``root`` holds now (none when there is no spool)."""
    spool = spool_dir(Path(root))
    return {p.name for p in spool.iterdir()} if spool is not None else set()


def finalize_interrupted(root: PathLike, earlier: set[str]) -> list[str]:
    """After an interrupted recording into ``root``: its complete spool units become units as
    after a normal run (an incomplete one never appeared in the spool); the counts its
    processes left (``summary-*``/``inprocess-*`` JSON, of a run cut short) are dropped,
    those of earlier runs (``earlier``: :func:`spool_entries` before it) kept, and the spool
    is removed when nothing is left in it. Returns :func:`finalize_spool`'s problem lines."""
    _, problems = finalize_spool(root)
    _drop_counts(Path(root) / SPOOL, earlier, ("summary-", "inprocess-"))
    return problems


def drop_spent_counts(root: PathLike, earlier: set[str]) -> None:
    """After a recording into ``root`` ended and :func:`finalize_spool` ran: the counts its
    processes left (names not in ``earlier``, :func:`spool_entries` before it) are spent, and
    removed, with the spool when nothing is left in it. No reader needs them after the run:
    the launches' times in the application are in the units' manifests (``capture``), and the
    run's counts were read (:func:`spool_summaries`) before this is called; ``inprocess-*``
    is read only by the application workflow, in a directory of its own, before it is done
    (``apps/recording.py``). Only while spool units remain (they could not be turned into
    units yet) are the interposer's ``summary-*`` kept: a later :func:`finalize_spool` times
    those units with them. Removing a file changes no unit: a kill at any point leaves every
    unit as it was, at worst a count behind."""
    spool = Path(root) / SPOOL
    pending = real_dir(spool) and any(p.is_dir() and p.name[:1].isdigit()
                                      for p in spool.iterdir())
    _drop_counts(spool, earlier, ("inprocess-",) if pending else ("summary-", "inprocess-"))


def _drop_counts(spool: Path, earlier: set[str], prefixes: tuple[str, ...]) -> None:
    if not real_dir(spool):  # never through a link
        return
    for p in spool.glob("*.json"):
        if p.name not in earlier and p.name.startswith(prefixes):
            p.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        spool.rmdir()  # only when empty


def spool_summaries(root: PathLike) -> list[dict[str, Any]]:
    """What the interposer of each recorded process counted (launches, kernels seen)."""
    return _read_counts(root, "summary-", set())


def inprocess_summaries(root: PathLike, earlier: set[str]) -> list[dict[str, Any]]:
    """What the in-process capture of each Python process counted (``inprocess-*`` JSON not
    in ``earlier``, :func:`spool_entries` before the run), read before they are dropped."""
    return _read_counts(root, "inprocess-", earlier)


def _read_counts(root: PathLike, prefix: str, earlier: set[str]) -> list[dict[str, Any]]:
    out = []
    spool = Path(root) / SPOOL
    for p in sorted(spool.glob(f"{prefix}*.json") if real_dir(spool) else []):
        if p.name in earlier:
            continue
        try:
            s = json.loads(read_regular(p, limit=JSON_LIMIT).decode("utf-8"))
        except (OSError, ValueError, KernforgeError):
            continue
        if isinstance(s, dict):
            out.append(s)
    return out


# ---- reading ----------------------------------------------------------------------------------
def is_native(manifest: dict[str, Any]) -> bool:
    return manifest.get("kind") == "native"


def load_native(unit: Path, m: dict[str, Any], *, verify: bool = False) -> NativeRecording:
    """Build a :class:`NativeRecording` from an already parsed v2 manifest."""
    path = unit / MANIFEST
    if m.get("schema_version") not in (NATIVE_SCHEMA, SEQUENCE_SCHEMA) or \
            (m.get("schema_version") == SEQUENCE_SCHEMA) != ("sequence" in m):
        has = "with" if "sequence" in m else "without"
        raise _bad(path, f"native units are schema_version {NATIVE_SCHEMA} (one launch) or "
                         f"{SEQUENCE_SCHEMA} (a sequence, with its launches), not "
                         f"{m.get('schema_version')!r} {has} a sequence")
    if m.get("checksum") != manifest_checksum(m):
        raise _bad(path, "checksum mismatch: the manifest was altered or damaged")
    try:
        k, launch, params = m["kernel"], m["launch"], m["params"]
        loader = _make_loader(unit, m["blobs"])
        steps, seq_info = load_steps(m)
        rec = NativeRecording(
            path=unit, entry=k["entry"], name=k.get("name") or k["entry"], image=k["image"],
            image_kind=k.get("image_kind", ""), grid=tuple(launch["grid"]),  # type: ignore[arg-type]
            block=tuple(launch["block"]), shared_mem=int(launch["shared_mem"]),  # type: ignore[arg-type]
            params=tuple(NativeParam(int(p["offset"]), int(p["size"]),
                                     tuple((int(o), int(r)) for o, r in p.get("pointers", [])))
                         for p in params["layout"]),
            param_bytes=bytes.fromhex(params["bytes"]),
            regions=tuple(NativeRegion(int(r["address"]), int(r["size"]), r["kind"],
                                       r["prologue"], r.get("epilogue"))
                          for r in m["regions"]),
            launch_attrs=tuple(bytes.fromhex(a) for a in launch.get("attrs", [])),
            func_attrs=FuncAttrs.from_json(launch.get("func_attrs")),
            identity=m.get("identity", {}), capture=m.get("capture", {}),
            instance=int(m.get("instance", 0)), created=m.get("created", ""),
            kernforge_version=m.get("kernforge_version", ""), loader=loader,
            source=NativeSource.from_json(m["source"]) if m.get("source") else None,
            steps=steps, sequence=seq_info)
        check_blob_files(unit, m)  # sizes and headers now, before anything runs
        for what, blob_id, size in [("the module image", rec.image, None)] + [
                (f"launch {j}'s module image", s.image, None) for j, s in enumerate(steps)] + [
                (f"region {i}", b, r.size) for i, r in enumerate(rec.regions)
                for b in (r.prologue, r.epilogue) if b is not None]:
            info = m["blobs"].get(blob_id)
            if info is None:
                raise _bad(path, f"{what} references blob {blob_id} which is not listed "
                                 "under blobs")
            if size is not None and int(np.prod(info["shape"])) * \
                    np.dtype(info["dtype"]).itemsize != size:
                raise _bad(path, f"{what} is {size} bytes but its blob {blob_id} holds "
                                 f"{info['dtype']}{info['shape']}")
    except RecordingFormatError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _bad(path, f"malformed value: {type(exc).__name__}: {exc}") from exc
    src = m.get("source")
    if src and hashlib.sha256(str(src.get("code", "")).encode("utf-8")).hexdigest() \
            != src.get("code_sha256"):
        raise _bad(path, "source.code does not match source.code_sha256")
    if verify:
        for blob_id in m["blobs"]:
            loader(blob_id)
    return rec


def is_native_unit(path: PathLike) -> bool:
    """Whether the unit at ``path`` is a native one (a cheap look at its manifest)."""
    try:
        with open(Path(path) / MANIFEST, encoding="utf-8", errors="replace") as f:
            head = f.read(4096)
    except OSError:
        return False
    return '"kind": "native"' in head


def read_native(path: PathLike, *, verify: bool = False) -> NativeRecording:
    unit = Path(path)
    mpath = unit / MANIFEST
    try:
        m = parse_json(mpath.read_text("utf-8", errors="replace"))
    except (FileNotFoundError, NotADirectoryError):
        if not unit.is_dir():
            raise no_such_unit(unit) from None
        raise recordings_root_error(unit) or _bad(
            mpath, "missing: this directory is not a recorded unit") from None
    except DamagedJSON as exc:
        raise _bad(mpath, str(exc)) from None
    if not isinstance(m, dict) or m.get("format") != FORMAT or not is_native(m):
        raise _bad(mpath, "not a native (driver-level) kernforge recording")
    return load_native(unit, m, verify=verify)
