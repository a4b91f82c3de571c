"""The frozen data model: what a kernel is, how it is compiled and how it is launched."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import ConfigError

LANGUAGES = ("c", "cuda", "python")
Scalar = int | float | bool | str


def _dims(value: int | Iterable[int], what: str) -> tuple[int, int, int]:
    vals = [int(value)] if isinstance(value, int) else [int(v) for v in value]
    if not 1 <= len(vals) <= 3 or any(v < 1 for v in vals):
        raise ConfigError(
            f"{what} must be 1 to 3 positive integers, got {value!r}",
            hint=f"write {what} as an int or a tuple such as (256, 1, 1)",
        )
    return tuple(vals + [1] * (3 - len(vals)))  # type: ignore[return-value]


def _sorted_items(values: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    items = values.items() if isinstance(values, Mapping) else values
    out = tuple(sorted((str(k), v) for k, v in items))
    return out


@dataclass(frozen=True)
class Param:
    """One parameter of a kernel's entry point, as the source declares it."""

    name: str
    ctype: str  # the declared type, e.g. "const double *"
    dtype: str  # numpy dtype name of the value or pointee, e.g. "float64"
    pointer: bool = False
    const: bool = False


@dataclass(frozen=True)
class KernelSource:
    """Kernel code in one language plus the name of its entry point."""

    code: str
    entry: str
    language: str = "c"
    signature: tuple[Param, ...] | None = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise ConfigError(
                f"unknown kernel language {self.language!r}",
                hint=f"use one of {', '.join(LANGUAGES)}",
            )
        if not self.entry.isidentifier():
            raise ConfigError(f"entry point {self.entry!r} is not an identifier",
                              hint="pass the name of the kernel function")

    @property
    def digest(self) -> str:
        sig = repr(self.signature) if self.signature is not None else ""
        return hashlib.sha256(
            f"{self.language}\0{self.entry}\0{self.code}\0{sig}".encode()).hexdigest()

    def with_code(self, code: str) -> KernelSource:
        """The same kernel with new code; its signature is parsed again from that code."""
        return replace(self, code=code, signature=None)


# OpenMP threads of one CPU launch: far above any core count, far below what crashes the
# runtime (100000 threads exhaust the stacks and segfault)
MAX_THREADS = 1024


@dataclass(frozen=True)
class LaunchConfig:
    """Launch geometry. GPU backends use grid/block/shared memory, the CPU backend threads."""

    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    shared_mem: int = 0
    threads: int | None = None  # CPU: OpenMP threads; None = the runtime's default

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _dims(self.grid, "grid"))
        object.__setattr__(self, "block", _dims(self.block, "block"))
        if self.shared_mem < 0:
            raise ConfigError("shared_mem must be >= 0", hint="give dynamic shared memory in bytes")
        if self.threads is not None and not 1 <= self.threads <= MAX_THREADS:
            raise ConfigError(f"threads must be between 1 and {MAX_THREADS}, not "
                              f"{self.threads}", hint="omit threads to use the default")

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def reblocked(self, block: int | Iterable[int]) -> LaunchConfig:
        """The same work decomposition with another block: per dimension, the grid covers at
        least the recorded number of threads (for kernels that bounds-check their index)."""
        new = _dims(block, "block")
        grid = _dims([-(-g * b // nb) for g, b, nb in zip(self.grid, self.block, new)], "grid")
        return LaunchConfig(grid=grid, block=new, shared_mem=self.shared_mem,
                            threads=self.threads)

    def to_json(self) -> dict[str, Any]:
        return {"grid": list(self.grid), "block": list(self.block),
                "shared_mem": self.shared_mem, "threads": self.threads}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> LaunchConfig:
        return cls(grid=tuple(d.get("grid", (1, 1, 1))), block=tuple(d.get("block", (1, 1, 1))),
                   shared_mem=int(d.get("shared_mem", 0)), threads=d.get("threads"))


@dataclass(frozen=True)
class CompileOptions:
    """Backend knob values (name -> value), validated by the backend that compiles them."""

    values: tuple[tuple[str, Scalar], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _sorted_items(self.values))

    @classmethod
    def of(cls, mapping: Mapping[str, Scalar] | None = None, **kw: Scalar) -> CompileOptions:
        merged = dict(mapping or {})
        merged.update(kw)
        return cls(tuple(merged.items()))

    def get(self, name: str, default: Any = None) -> Any:
        return dict(self.values).get(name, default)

    def as_dict(self) -> dict[str, Scalar]:
        return dict(self.values)

    def merged(self, other: CompileOptions | Mapping[str, Scalar]) -> CompileOptions:
        extra = other.as_dict() if isinstance(other, CompileOptions) else dict(other)
        return CompileOptions.of(self.as_dict(), **extra)


@dataclass(frozen=True)
class Variant:
    """One realization of a kernel: source + compile options + launch + tunable #defines.

    ``constants`` are scalar parameters compiled in as compile-time constants (constant
    specialization); a launch whose runtime value differs is refused.
    """

    source: KernelSource
    options: CompileOptions = field(default_factory=CompileOptions)
    launch: LaunchConfig = field(default_factory=LaunchConfig)
    defines: tuple[tuple[str, str], ...] = ()
    constants: tuple[tuple[str, Scalar], ...] = ()

    def __post_init__(self) -> None:
        defs = _sorted_items(self.defines)
        for k, _ in defs:
            if not k.isidentifier():
                raise ConfigError(f"#define name {k!r} is not an identifier",
                                  hint="use NAME=VALUE with a C identifier as NAME")
        object.__setattr__(self, "defines", tuple((k, str(v)) for k, v in defs))
        object.__setattr__(self, "constants", _sorted_items(self.constants))

    def with_(self, *, options: Mapping[str, Scalar] | None = None,
              defines: Mapping[str, Any] | None = None,
              launch: LaunchConfig | None = None,
              source: KernelSource | None = None,
              constants: Mapping[str, Scalar] | None = None) -> Variant:
        """A copy with options/defines/constants overridden (merged) or launch/source replaced."""
        return Variant(
            source=source or self.source,
            options=self.options.merged(options or {}),
            launch=launch or self.launch,
            defines=tuple({**dict(self.defines), **{k: str(v) for k, v in (defines or {}).items()}}.items()),
            constants=tuple({**dict(self.constants), **dict(constants or {})}.items()),
        )

    def key(self) -> str:
        """A stable hash of everything that makes this variant what it is."""
        blob = json.dumps({"src": self.source.digest, "opt": self.options.values,
                           "launch": self.launch.to_json(), "def": self.defines,
                           "const": self.constants},
                          sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
