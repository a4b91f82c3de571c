"""The in-memory form of a launch recorded at the driver level (a native unit).

A native unit is what the driver interposer sees of one ``cuLaunchKernel``: a module image
(cubin, fatbin or PTX), the kernel's mangled name, the launch geometry, the raw parameter
bytes with each parameter's offset and size, and the contents before and after the launch of
every device allocation the parameters point into, at their recorded virtual addresses.
The on-disk form is recording format v2 (docs/recording-format.md, docs/recording-native.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError

ALLOC_KINDS = ("alloc", "managed", "async", "vmm", "global")


@dataclass(frozen=True)
class NativeRegion:
    """One device allocation a launch touched: ``size`` bytes at ``address``."""

    address: int
    size: int
    kind: str
    prologue: str  # blob id of the contents before the launch
    epilogue: str | None  # blob id after the launch; None = unchanged

    @property
    def end(self) -> int:
        return self.address + self.size


@dataclass(frozen=True)
class NativeParam:
    """One kernel parameter: ``size`` bytes at ``offset`` of the parameter buffer; ``pointers``
    lists (offset within the buffer, region index) of every 8-byte word pointing into a region."""

    offset: int
    size: int
    pointers: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class NativeSource:
    """The source a native kernel was compiled from: captured from NVRTC in the recorded
    process (``origin="nvrtc"``), or a file the user bound to the kernel (``origin="nvcc"``,
    ``kernforge tune --source FILE.cu``). ``options`` are the compiler options as given (NVRTC's,
    or nvcc's ``-I``/``-D``); ``name_expression`` the C++ name NVRTC was asked to lower to the
    recorded entry (None: the entry is not a template instantiation named that way)."""

    origin: str  # nvrtc | nvcc
    code: str
    options: tuple[str, ...] = ()
    headers: tuple[tuple[str, str], ...] = ()  # NVRTC headers given by name: (name, source)
    name_expression: str | None = None
    output: str = "cubin"  # what NVRTC handed the program: cubin | ptx
    library: str = ""  # the libnvrtc that compiled it in the recorded process
    compiler_version: tuple[int, int] = (0, 0)
    program: str = ""  # NVRTC's program name, or the bound file's path

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "code": self.code, "options": list(self.options),
                "headers": [{"name": n, "source": c} for n, c in self.headers],
                "name_expression": self.name_expression, "output": self.output,
                "library": self.library, "compiler_version": list(self.compiler_version),
                "program": self.program}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NativeSource:
        ver = d.get("compiler_version") or (0, 0)
        return cls(str(d["origin"]), str(d["code"]), tuple(str(o) for o in d.get("options", ())),
                   tuple((str(h["name"]), str(h["source"])) for h in d.get("headers", ())),
                   d.get("name_expression"), str(d.get("output") or "cubin"),
                   str(d.get("library") or ""), (int(ver[0]), int(ver[1])),
                   str(d.get("program") or ""))


@dataclass(frozen=True)
class NativeBuild:
    """How a candidate's module image is made instead of loading the recorded one.

    ``kind="source"``: ``source`` compiled again (NVRTC or nvcc, by its origin) with the cuda
    backend's knobs ``knobs`` (name -> value: maxrregcount, fmad, launch bounds, ...) and
    ``defines`` applied over its own options; ``code``, when given, replaces the source text
    (source evolution). ``kind="ptx"``: the PTX held inside the recorded fatbin, for the JIT."""

    kind: str = "source"
    source: NativeSource | None = None
    knobs: tuple[tuple[str, Any], ...] = ()
    defines: tuple[tuple[str, str], ...] = ()
    code: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("source", "ptx"):
            raise ConfigError(f"unknown image build {self.kind!r}", hint="use source or ptx")
        if self.kind == "source" and self.source is None:
            raise ConfigError("a source build needs the kernel's source",
                              hint="record an NVRTC program, or bind a file with --source")

    def label(self) -> str:
        if self.kind == "ptx":
            return "ptx"
        parts = [f"{k}={v}" for k, v in self.knobs] + [f"-D{k}={v}" for k, v in self.defines]
        if self.code is not None:
            parts.append("evolved")
        return f"{self.source.origin if self.source else 'source'}" + \
            (f"({' '.join(parts)})" if parts else "")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.source.to_json() if self.source else None,
                "knobs": [[k, v] for k, v in self.knobs],
                "defines": [[k, v] for k, v in self.defines], "code": self.code}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NativeBuild:
        src = d.get("source")
        return cls(str(d.get("kind", "source")), NativeSource.from_json(src) if src else None,
                   tuple((str(k), v) for k, v in d.get("knobs", ())),
                   tuple((str(k), str(v)) for k, v in d.get("defines", ())), d.get("code"))


MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
DEFAULT_DYNAMIC_SHARED = 48 * 1024  # what a launch may use without raising it


@dataclass(frozen=True)
class FuncAttrs:
    """What the recorded program set on the launched kernel's function before the launch:
    ``cuFuncSetAttribute`` (or ``cuKernelSetAttribute``) attribute id -> value, in the order
    first set, the cache configuration (``cuFuncSetCacheConfig``, a ``CUfunc_cache``) and the
    shared-memory bank configuration (``cuFuncSetSharedMemConfig``); None where it set none."""

    set: tuple[tuple[int, int], ...] = ()
    cache_config: int | None = None
    shared_config: int | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> FuncAttrs:
        """From a unit's ``func_attrs`` (absent in units recorded before it existed: none set).
        Malformed values raise TypeError or ValueError (the caller names the unit)."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise TypeError("func_attrs is not an object")

        def opt(v: Any) -> int | None:
            return None if v is None else int(v)
        return cls(tuple((int(k), int(v)) for k, v in d.get("set", ())),
                   opt(d.get("cache_config")), opt(d.get("shared_config")))

    def to_json(self) -> dict[str, Any]:
        return {"set": [list(kv) for kv in self.set], "cache_config": self.cache_config,
                "shared_config": self.shared_config}

    def __bool__(self) -> bool:
        return bool(self.set) or self.cache_config is not None or self.shared_config is not None

    def for_launch(self, shared_mem: int) -> tuple[tuple[int, int], ...]:
        """The attributes to set before a launch with ``shared_mem`` bytes of dynamic shared
        memory: those recorded, and MAX_DYNAMIC_SHARED_SIZE_BYTES raised to ``shared_mem`` when
        it is above 48 KiB and no recorded value covers it (a unit recorded before attributes
        were: the program must have raised it)."""
        out = list(self.set)
        have = dict(self.set).get(MAX_DYNAMIC_SHARED, DEFAULT_DYNAMIC_SHARED)
        if shared_mem > max(have, DEFAULT_DYNAMIC_SHARED):
            out = [kv for kv in out if kv[0] != MAX_DYNAMIC_SHARED]
            out.append((MAX_DYNAMIC_SHARED, shared_mem))
        return tuple(out)


@dataclass(frozen=True)
class NativeLaunch:
    """One launch of a recorded sequence: its kernel (entry in the module image blob ``image``),
    geometry and parameter bytes, whose pointer words index the unit's regions."""

    entry: str
    image: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    params: tuple[NativeParam, ...]
    param_bytes: bytes
    launch_attrs: tuple[bytes, ...] = ()
    app_time_ms: float | None = None
    func_attrs: FuncAttrs = field(default_factory=FuncAttrs)

    def pointer_words(self) -> list[tuple[int, int]]:
        return [pw for p in self.params for pw in p.pointers]


@dataclass(frozen=True)
class NativeRecording:
    """One recorded native launch, ready to replay through the driver API (a
    :class:`~.unit.Unit` that holds the module image, and the source when NVRTC compiled it in
    the recorded process); or a recorded sequence (``steps``: every launch in order, the first being the one the top-level fields
    describe), whose regions hold the state before the first launch and after the last."""

    path: Path
    entry: str  # the mangled name, as the image knows the kernel
    name: str  # a readable short name
    image: str  # blob id of the module image
    image_kind: str  # cubin | fatbin | ptx | text
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    params: tuple[NativeParam, ...]
    param_bytes: bytes
    regions: tuple[NativeRegion, ...]
    launch_attrs: tuple[bytes, ...] = ()
    func_attrs: FuncAttrs = field(default_factory=FuncAttrs)  # what the program set on it
    identity: Mapping[str, Any] = field(default_factory=dict)
    capture: Mapping[str, Any] = field(default_factory=dict)
    instance: int = 0
    created: str = ""
    kernforge_version: str = ""
    source: NativeSource | None = None  # captured from NVRTC, when the program compiled it so
    steps: tuple[NativeLaunch, ...] = ()  # a sequence unit's launches; () for one launch
    sequence: Mapping[str, Any] = field(default_factory=dict)  # requested, steps, ended
    loader: Callable[[str], np.ndarray] | None = field(default=None, compare=False, repr=False)

    backend = "driver"

    @property
    def unit(self) -> str:
        return self.path.name

    @property
    def kernel(self) -> str:
        return self.name or self.entry

    @property
    def holds(self) -> frozenset[str]:
        return frozenset({"image", "source"} if self.source is not None else {"image"})

    @property
    def in_program_s(self) -> float | None:
        ms = self.capture.get("app_time_ms")
        return float(ms) / 1e3 if isinstance(ms, (int, float)) and ms > 0 else None

    def matches(self, pattern: str | None) -> bool:
        """``pattern`` (a glob) matches the mangled name, the readable name or the unit
        directory."""
        return not pattern or any(fnmatchcase(s, pattern)
                                  for s in (self.entry, self.name, self.path.name))

    def describe(self, cache: Mapping[str, Any]) -> dict[str, Any]:
        src = self.source
        return {
            "path": str(self.path), "kernel": self.entry, "name": self.name,
            "backend": "driver", "image_kind": self.image_kind, "grid": list(self.grid),
            "block": list(self.block), "shared_mem": self.shared_mem,
            "param_bytes": len(self.param_bytes),
            "params": [{"offset": p.offset, "size": p.size,
                        "points_into": sorted({i for _, i in p.pointers})} for p in self.params],
            "regions": [{"address": hex(g.address), "size": g.size, "kind": g.kind,
                         "written": g.epilogue is not None} for g in self.regions],
            "bytes": self.nbytes, "identity": dict(self.identity), "capture": dict(self.capture),
            "cache": dict(cache),
            "sequence": {**self.sequence, "launches": [s.entry for s in self.steps]}
            if self.is_sequence else None,
            "source": None if src is None else {
                "origin": src.origin, "program": src.program, "options": list(src.options),
                "name_expression": src.name_expression,
                "headers": [n for n, _ in src.headers], "lines": src.code.count("\n") + 1}}

    def blob(self, blob_id: str) -> np.ndarray:
        if self.loader is None:
            raise ConfigError(f"native recording {self.path} was built without a blob loader")
        return self.loader(blob_id)

    def image_bytes(self) -> bytes:
        return self.blob(self.image).tobytes()

    def prologue(self, i: int) -> np.ndarray:
        return self.blob(self.regions[i].prologue)

    def expected(self, i: int) -> np.ndarray:
        r = self.regions[i]
        return self.blob(r.epilogue or r.prologue)

    @property
    def written(self) -> tuple[int, ...]:
        return tuple(i for i, r in enumerate(self.regions) if r.epilogue is not None)

    @property
    def nbytes(self) -> int:
        return sum(r.size for r in self.regions)

    def pointer_words(self) -> list[tuple[int, int]]:
        """(buffer offset, region index) of every parameter word pointing into a region."""
        return [pw for p in self.params for pw in p.pointers]

    @property
    def is_sequence(self) -> bool:
        return bool(self.steps)

    def of_kernel(self, launch: NativeLaunch) -> bool:
        """Whether a launch of the sequence is of the recorded kernel (entry and image)."""
        return launch.entry == self.entry and launch.image == self.image

    def first_launch(self, written: tuple[int, ...]) -> NativeRecording:
        """The sequence's first launch as a one-launch recording over the same regions (same
        order, so a replay's placement serves both). Its state after the launch was not
        recorded: ``written`` (the regions the first launch changes, found by running it) get
        their prologue as a stand-in epilogue, so :attr:`written` is right; do not verify
        against it."""
        regions = tuple(replace(r, epilogue=r.prologue if i in written else None)
                        for i, r in enumerate(self.regions))
        return replace(self, regions=regions, steps=(), sequence={})
