"""Recording format v1: writer and reader (the spec is docs/recording-format.md).

A recordings root holds one directory per recorded launch, ``<entry>-<n>``, containing
``manifest.json`` and ``blobs/<id>.npy``. A blob's id is the sha256 (hex) of the exact bytes of
its ``.npy`` file, so identical buffers are stored once and every blob can be verified. A unit
is built in ``<root>/.tmp-<uuid>/`` and renamed into place only when complete.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .._version import __version__
from ..backends import Backend
from ..core import (
    CompileOptions,
    KernelSource,
    KernforgeError,
    LaunchConfig,
    Param,
    RecordedArg,
    Recording,
    RecordingError,
    RecordingFormatError,
    Tolerance,
    Variant,
)
from ..core.jsonio import DamagedJSON, parse_json
from ._layout import (
    BLOBS,
    FORMAT,
    MANIFEST,
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    TMP_PREFIX,
    PathLike,
    canonical_json,
    clean_partial,
    find_recordings,
    fsync_dir,
    manifest_checksum,
    no_such_unit,
    recordings_root_error,
)

__all__ = ["BLOBS", "FORMAT", "MANIFEST", "READABLE_VERSIONS", "SCHEMA_VERSION", "TMP_PREFIX",
           "PathLike", "canonical_json", "clean_partial", "find_recordings", "load_recording",
           "manifest_checksum", "verify_blob", "write_recording"]

_CHUNK = 1 << 22
_TOP_KEYS = ("format", "schema_version", "checksum", "kernforge_version", "created", "backend",
             "identity", "kernel", "options", "defines", "launch", "instance", "args", "blobs")
_KERNEL_KEYS = ("language", "entry", "code", "code_sha256", "signature")
_ARG_KEYS = ("name", "kind", "dtype", "shape", "value", "prologue", "epilogue", "policy")
_BLOB_KEYS = ("bytes", "dtype", "shape")
_REWRITE = "re-record the launch (kernforge record ...)"


# ---- writing ----------------------------------------------------------------------------------
class _HashingWriter:
    """A file wrapper that hashes everything numpy writes through it."""

    def __init__(self, fp: BinaryIO) -> None:
        self.fp, self.sha, self.size = fp, hashlib.sha256(), 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.fp.write(data)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _normalize(array: np.ndarray) -> np.ndarray:
    """C order and native byte order, so equal contents give equal .npy bytes."""
    a = np.asarray(array)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return np.ascontiguousarray(a)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = _normalize(a), _normalize(b)
    return (a.dtype == b.dtype and a.shape == b.shape
            and np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)))


class _BlobStore:
    """Writes blobs into one unit's ``blobs/`` directory, each content once."""

    def __init__(self, unit: Path) -> None:
        self.dir = unit / BLOBS
        self.dir.mkdir()
        self.index: dict[str, dict[str, Any]] = {}

    def save(self, array: np.ndarray) -> str:
        a = _normalize(array)
        part = self.dir / f"{TMP_PREFIX}{uuid.uuid4().hex}"
        with open(part, "wb") as f:
            w = _HashingWriter(f)
            np.lib.format.write_array(w, a, version=(1, 0), allow_pickle=False)  # type: ignore[arg-type]
            f.flush()
            os.fsync(f.fileno())
        blob_id = w.sha.hexdigest()
        if blob_id in self.index:
            part.unlink()
        else:
            os.rename(part, self.dir / f"{blob_id}.npy")
            self.index[blob_id] = {"bytes": w.size, "dtype": a.dtype.name, "shape": list(a.shape)}
        return blob_id


def _scalar_json(value: Any, dtype: str) -> Any:
    v = np.dtype(dtype).type(value).item()
    if isinstance(v, float) and not np.isfinite(v):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _arg_entries(args: Sequence[tuple[Param, Any]], prologue: Mapping[str, np.ndarray],
                 epilogue: Mapping[str, np.ndarray], policies: Mapping[str, Tolerance],
                 store: _BlobStore) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p, value in args:
        if not p.pointer:
            out.append({"name": p.name, "kind": "scalar", "dtype": p.dtype, "shape": [],
                        "value": _scalar_json(value, p.dtype), "prologue": None,
                        "epilogue": None, "policy": None})
            continue
        if p.name not in prologue:
            raise RecordingError(f"no prologue snapshot for array argument {p.name!r}",
                                 hint="pass the contents of every pointer argument")
        before = _normalize(prologue[p.name])
        after = epilogue.get(p.name)
        pro = store.save(before)
        epi = None if after is None or _same_bits(before, after) else store.save(after)
        out.append({"name": p.name, "kind": "array", "dtype": before.dtype.name,
                    "shape": list(before.shape), "value": None, "prologue": pro, "epilogue": epi,
                    "policy": policies.get(p.name, Tolerance()).to_json()})
    return out


def _next_instance(root: Path, entry: str) -> int:
    pat = re.compile(re.escape(entry) + r"-(\d+)")
    nums = [int(m.group(1)) for d in root.iterdir() if (m := pat.fullmatch(d.name))]
    return max(nums) + 1 if nums else 0


def _publish(tmp: Path, root: Path, manifest: dict[str, Any], instance: int, *,
             name: str | None = None) -> Path:
    """Write the manifest last, then rename the unit into place (next free instance) as
    ``<name>-<n>`` (``name`` defaults to the kernel's entry)."""
    entry, written = name or manifest["kernel"]["entry"], None
    while True:
        final = root / f"{entry}-{instance}"
        if not final.exists():
            if written != instance:
                manifest["instance"] = instance
                manifest["checksum"] = manifest_checksum(manifest)
                _write_file(tmp / MANIFEST, json.dumps(manifest, indent=2,
                                                       allow_nan=False).encode() + b"\n")
                fsync_dir(tmp)
                written = instance
            try:
                os.rename(tmp, final)
                fsync_dir(root)
                return final
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        instance += 1


def write_recording(root: PathLike, *, backend: Backend, variant: Variant,
                    args: Sequence[tuple[Param, Any]], prologue: Mapping[str, np.ndarray],
                    epilogue: Mapping[str, np.ndarray],
                    policies: Mapping[str, Tolerance] | None = None,
                    instance: int | None = None,
                    capture: Mapping[str, Any] | None = None) -> Path:
    """Write one replay unit atomically under ``root``; return its directory.

    ``args`` pairs every parameter of the entry point with the value passed (scalars are stored
    by value; arrays are taken from ``prologue``/``epilogue``, the host copies before and after
    the launch). An epilogue equal bit-for-bit to its prologue is stored as ``null``.
    ``variant`` should hold the resolved compile options. ``instance`` defaults to the next
    free number for this entry; a taken number moves on to the next free one. ``capture``
    (optional, JSON-serializable) is stored as the manifest's optional ``capture`` object:
    where the launch was captured (``origin``) and e.g. the mangled symbol, name expression
    and original compiler options of a CuPy kernel.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f"{TMP_PREFIX}{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        store = _BlobStore(tmp)
        arg_entries = _arg_entries(args, prologue, epilogue, policies or {}, store)
        fsync_dir(store.dir)
        src = variant.source
        manifest: dict[str, Any] = {
            "format": FORMAT, "schema_version": SCHEMA_VERSION, "kernforge_version": __version__,
            "created": datetime.now(UTC).isoformat(timespec="microseconds"),
            "backend": backend.name, "identity": backend.identity(),
            "kernel": {"language": src.language, "entry": src.entry, "code": src.code,
                       "code_sha256": hashlib.sha256(src.code.encode()).hexdigest(),
                       "signature": [{"name": p.name, "ctype": p.ctype, "dtype": p.dtype,
                                      "pointer": p.pointer, "const": p.const}
                                     for p, _ in args]},
            "options": variant.options.as_dict(), "defines": dict(variant.defines),
            "launch": variant.launch.to_json(), "instance": 0, "args": arg_entries,
            "blobs": store.index,
        }
        if capture:
            manifest["capture"] = dict(capture)
        manifest = json.loads(json.dumps(manifest, default=str))  # plain JSON types only
        n = instance if instance is not None else _next_instance(root, src.entry)
        return _publish(tmp, root, manifest, n)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise RecordingError(f"cannot write recording under {root}: {exc}",
                                 hint="check free disk space and write permission") from exc
        raise


# ---- reading ----------------------------------------------------------------------------------
def _bad(path: Path, problem: str, hint: str = _REWRITE) -> RecordingFormatError:
    return RecordingFormatError(f"{path}: {problem}", hint=hint)


def _read_manifest(unit: Path) -> dict[str, Any]:
    path = unit / MANIFEST
    if not unit.is_dir():
        raise no_such_unit(unit)
    if not path.is_file():
        raise recordings_root_error(unit) or _bad(
            path, "missing: this directory is not a recorded unit",
            "point at a unit directory (it holds manifest.json)")
    text = path.read_text("utf-8", errors="replace")
    try:
        m = parse_json(text)
    except DamagedJSON as exc:
        raise _bad(path, str(exc)) from None
    if not isinstance(m, dict):
        raise _bad(path, "not a kernforge manifest (the top level is not a JSON object)")
    if m.get("format") != FORMAT:
        raise _bad(path, f"not a kernforge recording (format is {m.get('format')!r}, expected "
                   f"{FORMAT!r})", "point at a directory written by kernforge record")
    if m.get("kind") == "native":
        raise _bad(path, "a native (driver-level) unit: it has no source for this command",
                   "replay and inspect it (kernforge replay / inspect); kernforge tune DIR "
                   "tunes its geometry and JIT options")
    if m.get("schema_version") not in READABLE_VERSIONS:
        raise _bad(path, f"unknown schema_version {m.get('schema_version')!r}; this kernforge "
                   f"({__version__}) reads versions {', '.join(map(str, READABLE_VERSIONS))}",
                   "upgrade kernforge (pip install -U kernforge) to read this recording")
    if "checksum" not in m:
        raise _bad(path, "has no checksum field")
    if m["checksum"] != manifest_checksum(m):
        raise _bad(path, "checksum mismatch: manifest.json was modified after recording",
                   "re-record, or override tolerances at replay time with --tolerance instead "
                   "of editing the manifest")
    return m


def _require(path: Path, obj: Any, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if not isinstance(obj, dict) or k not in obj]
    if missing:
        raise _bad(path, f"{where} lacks required key(s) {', '.join(missing)}")


def _npy_header(path: Path) -> tuple[tuple[int, ...], np.dtype]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
    return tuple(shape), dtype


def check_blob_files(unit: Path, m: dict[str, Any]) -> None:
    """Each blob the manifest lists exists with its recorded size, dtype and shape (cheap: no
    hashing; contents are hash-checked on first load)."""
    mpath = unit / MANIFEST
    for blob_id, info in m["blobs"].items():
        _require(mpath, info, _BLOB_KEYS, f"blobs[{blob_id!r}]")
        path = unit / BLOBS / f"{blob_id}.npy"
        if not path.is_file():
            raise _bad(path, "blob referenced by manifest.json is missing")
        if path.stat().st_size != info["bytes"]:
            raise _bad(path, f"blob is {path.stat().st_size} bytes, manifest.json says "
                       f"{info['bytes']} (truncated or replaced)")
        try:
            shape, dtype = _npy_header(path)
        except (ValueError, OSError) as exc:
            raise _bad(path, f"blob is not a readable .npy file ({exc})") from None
        if list(shape) != list(info["shape"]) or dtype.name != info["dtype"]:
            raise _bad(path, f"blob holds {dtype.name}{list(shape)}, manifest.json says "
                       f"{info['dtype']}{list(info['shape'])}")


def _check_blobs(unit: Path, m: dict[str, Any]) -> None:
    mpath = unit / MANIFEST
    check_blob_files(unit, m)
    for a in m["args"]:
        for blob_id in (a["prologue"], a["epilogue"]):
            if blob_id is None:
                continue
            info = m["blobs"].get(blob_id)
            if info is None:
                raise _bad(mpath, f"argument {a['name']!r} references blob {blob_id} which "
                           f"is not listed under blobs")
            if list(info["shape"]) != list(a["shape"]) or info["dtype"] != a["dtype"]:
                raise _bad(unit / BLOBS / f"{blob_id}.npy", f"blob holds {info['dtype']}"
                           f"{info['shape']} but argument {a['name']!r} is "
                           f"{a['dtype']}{a['shape']}")


def verify_blob(path: Path, blob_id: str) -> None:
    """Raise RecordingFormatError when the file's sha256 is not its name."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            sha.update(chunk)
    if sha.hexdigest() != blob_id:
        raise _bad(path, f"blob contents do not match their hash (sha256 {sha.hexdigest()}): "
                   "the file was corrupted or modified")


def _make_loader(unit: Path, blobs: Mapping[str, Any]) -> Callable[[str], np.ndarray]:
    verified: set[str] = set()
    lock = threading.Lock()

    def load(blob_id: str) -> np.ndarray:
        if blob_id not in blobs:
            raise _bad(unit / MANIFEST, f"no blob {blob_id!r} in this recording")
        path = unit / BLOBS / f"{blob_id}.npy"
        with lock:
            if blob_id not in verified:
                verify_blob(path, blob_id)
                verified.add(blob_id)
        empty = 0 in blobs[blob_id]["shape"]
        return np.load(path, mmap_mode=None if empty else "r", allow_pickle=False)

    return load


def _scalar_value(value: Any, dtype: str) -> Any:
    if isinstance(value, str) and np.dtype(dtype).kind in "fc":
        return float(value)
    return value


def _to_recording(unit: Path, m: dict[str, Any], loader: Callable[[str], np.ndarray]) -> Recording:
    k = m["kernel"]
    sig = tuple(Param(p["name"], p["ctype"], p["dtype"], bool(p["pointer"]), bool(p["const"]))
                for p in k["signature"])
    args = tuple(RecordedArg(
        name=a["name"], kind=a["kind"], dtype=a["dtype"], shape=tuple(a["shape"]),
        value=_scalar_value(a["value"], a["dtype"]), prologue=a["prologue"],
        epilogue=a["epilogue"],
        policy=Tolerance.from_json(a["policy"]) if a["policy"] else Tolerance())
        for a in m["args"])
    return Recording(
        path=unit, source=KernelSource(k["code"], k["entry"], k["language"], sig),
        options=CompileOptions.of(m["options"]), launch=LaunchConfig.from_json(m["launch"]),
        defines=tuple((str(n), str(v)) for n, v in m["defines"].items()),
        backend=m["backend"], args=args, identity=m["identity"],
        kernforge_version=m["kernforge_version"], created=m["created"],
        instance=int(m["instance"]), loader=loader)


def _validate(unit: Path, m: dict[str, Any]) -> None:
    mpath = unit / MANIFEST
    _require(mpath, m, _TOP_KEYS, "manifest")
    _require(mpath, m["kernel"], _KERNEL_KEYS, "kernel")
    for i, a in enumerate(m["args"]):
        _require(mpath, a, _ARG_KEYS, f"args[{i}]")
        if a["kind"] not in ("array", "scalar") or (a["kind"] == "array" and not a["prologue"]):
            raise _bad(mpath, f"args[{i}] ({a['name']!r}) is malformed: kind {a['kind']!r}, "
                       f"prologue {a['prologue']!r}")
    if hashlib.sha256(m["kernel"]["code"].encode()).hexdigest() != m["kernel"]["code_sha256"]:
        raise _bad(mpath, "kernel code does not match kernel.code_sha256")
    _check_blobs(unit, m)


def load_recording(path: PathLike, *, verify: bool = False) -> Recording:
    """Read and validate one unit. Blobs are hash-checked on first load (all now if ``verify``)."""
    unit = Path(path)
    m = _read_manifest(unit)
    mpath = unit / MANIFEST
    try:
        _validate(unit, m)
        loader = _make_loader(unit, m["blobs"])
        rec = _to_recording(unit, m, loader)
    except RecordingFormatError:
        raise
    except KernforgeError as exc:
        raise _bad(mpath, f"malformed value: {exc.message}") from exc
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise _bad(mpath, f"malformed value: {type(exc).__name__}: {exc}") from exc
    if verify:
        for blob_id in m["blobs"]:
            loader(blob_id)
    return rec
