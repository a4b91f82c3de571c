"""The in-memory form of one recorded kernel launch (the replay unit).

The on-disk format lives in :mod:`kernforge.record.format`; this module only describes what a
recording *is*: the variant that ran, its arguments, and where to find the memory before
(prologue) and after (epilogue) the launch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError
from .model import CompileOptions, KernelSource, LaunchConfig, Variant

TOLERANCE_MODES = ("bitwise", "abs", "rel", "norm")
NAN_POLICIES = ("fail", "match")


@dataclass(frozen=True)
class Tolerance:
    """Per-buffer correctness policy.

    - ``bitwise``: every element identical (NaN only where the expected value has the same NaN
      bits if ``nan="match"``);
    - ``abs``: ``|out - ref| <= atol``;
    - ``rel``: ``|out - ref| <= atol + rtol * |ref|``;
    - ``norm``: scale-invariant ``||out - ref|| / ||ref|| <= tol``.

    ``nan="fail"``: any NaN in the output fails; ``nan="match"``: NaN must appear exactly where
    the expected output has NaN.
    """

    mode: str = "bitwise"
    atol: float = 0.0
    rtol: float = 0.0
    tol: float = 0.0
    nan: str = "fail"

    def __post_init__(self) -> None:
        if self.mode not in TOLERANCE_MODES:
            raise ConfigError(f"unknown tolerance mode {self.mode!r}",
                              hint=f"use one of {', '.join(TOLERANCE_MODES)}")
        if self.nan not in NAN_POLICIES:
            raise ConfigError(f"unknown NaN policy {self.nan!r}", hint="use 'fail' or 'match'")
        for name in ("atol", "rtol", "tol"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ConfigError(f"tolerance {name}={v!r} must be finite and >= 0")

    @property
    def exact(self) -> bool:
        return self.mode == "bitwise"

    @classmethod
    def parse(cls, text: str) -> Tolerance:
        """Parse ``bitwise``, ``abs:1e-6``, ``rel:1e-5[,atol]`` or ``norm:1e-4`` (CLI form)."""
        mode, _, rest = text.strip().partition(":")
        nan = "fail"
        if rest.endswith(",nan=match"):
            rest, nan = rest[: -len(",nan=match")], "match"
        try:
            nums = [float(x) for x in rest.split(",") if x]
        except ValueError:
            raise ConfigError(f"cannot parse tolerance {text!r}",
                              hint="write bitwise, abs:1e-6, rel:1e-5 or norm:1e-4") from None
        if mode == "bitwise" and not nums:
            return cls(nan=nan)
        if mode == "abs" and len(nums) == 1:
            return cls("abs", atol=nums[0], nan=nan)
        if mode == "rel" and len(nums) in (1, 2):
            return cls("rel", rtol=nums[0], atol=nums[1] if len(nums) == 2 else 0.0, nan=nan)
        if mode == "norm" and len(nums) == 1:
            return cls("norm", tol=nums[0], nan=nan)
        raise ConfigError(f"cannot parse tolerance {text!r}",
                          hint="write bitwise, abs:1e-6, rel:1e-5[,atol] or norm:1e-4")

    def spec(self) -> str:
        """The CLI form :meth:`parse` reads back."""
        nums = {"bitwise": (), "abs": (self.atol,), "norm": (self.tol,),
                "rel": (self.rtol, self.atol) if self.atol else (self.rtol,)}[self.mode]
        nan = ",nan=match" if self.nan == "match" else ""
        return self.mode + (":" + ",".join(repr(x) for x in nums) + nan if nums or nan else "")

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "atol": self.atol, "rtol": self.rtol, "tol": self.tol,
                "nan": self.nan}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Tolerance:
        return cls(mode=d.get("mode", "bitwise"), atol=float(d.get("atol", 0.0)),
                   rtol=float(d.get("rtol", 0.0)), tol=float(d.get("tol", 0.0)),
                   nan=d.get("nan", "fail"))


@dataclass(frozen=True)
class RecordedArg:
    """One argument of a recorded launch: a scalar by value, or an array by blob reference."""

    name: str
    kind: str  # "array" | "scalar"
    dtype: str
    shape: tuple[int, ...] = ()
    value: Any = None  # scalars only
    prologue: str | None = None  # blob id of the contents before the launch
    epilogue: str | None = None  # blob id after the launch; None = unchanged
    policy: Tolerance = field(default_factory=Tolerance)

    @property
    def is_array(self) -> bool:
        return self.kind == "array"

    @property
    def written(self) -> bool:
        return self.epilogue is not None


@dataclass(frozen=True)
class Recording:
    """One recorded launch of one kernel, ready to replay (a :class:`~.unit.Unit` that holds
    the kernel's source)."""

    path: Path
    source: KernelSource
    options: CompileOptions
    launch: LaunchConfig
    defines: tuple[tuple[str, str], ...]
    backend: str
    args: tuple[RecordedArg, ...]
    identity: Mapping[str, Any] = field(default_factory=dict)
    kernforge_version: str = ""
    created: str = ""
    instance: int = 0
    loader: Callable[[str], np.ndarray] | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def unit(self) -> str:
        return self.path.name

    @property
    def kernel(self) -> str:
        return self.source.entry

    @property
    def holds(self) -> frozenset[str]:
        return frozenset({"source"})

    @property
    def in_program_s(self) -> float | None:
        return None  # the capture inside Python does not time the program's launches

    def matches(self, pattern: str | None) -> bool:
        """``pattern`` (a glob) matches the kernel's entry."""
        return not pattern or fnmatchcase(self.source.entry, pattern)

    def describe(self, cache: Mapping[str, Any]) -> dict[str, Any]:
        return {"path": str(self.path), "kernel": self.source.entry, "backend": self.backend,
                "launch": self.launch.to_json(), "options": self.options.as_dict(),
                "defines": dict(self.defines), "bytes": self.nbytes,
                "args": [{"name": a.name, "kind": a.kind, "dtype": a.dtype,
                          "shape": list(a.shape), "written": a.written,
                          "policy": a.policy.to_json()} for a in self.args],
                "cache": dict(cache)}

    @property
    def variant(self) -> Variant:
        return Variant(self.source, self.options, self.launch, self.defines)

    def arg(self, name: str) -> RecordedArg:
        for a in self.args:
            if a.name == name:
                return a
        raise ConfigError(f"recording {self.path} has no argument {name!r}",
                          hint=f"arguments are: {', '.join(a.name for a in self.args)}")

    def blob(self, blob_id: str) -> np.ndarray:
        if self.loader is None:
            raise ConfigError(f"recording {self.path} was built without a blob loader")
        return self.loader(blob_id)

    def prologue(self, name: str) -> np.ndarray:
        a = self.arg(name)
        assert a.prologue is not None, f"{name} is a scalar"
        return self.blob(a.prologue)

    def expected(self, name: str) -> np.ndarray:
        """The contents of array ``name`` after the launch (the prologue if unchanged)."""
        a = self.arg(name)
        blob = a.epilogue or a.prologue
        assert blob is not None, f"{name} is a scalar"
        return self.blob(blob)

    @property
    def nbytes(self) -> int:
        return sum(int(np.prod(a.shape)) * np.dtype(a.dtype).itemsize
                   for a in self.args if a.is_array)
