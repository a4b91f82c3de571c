"""The in-memory form of a launch recorded at the driver level (a native unit).

A native unit is what the driver interposer sees of one ``cuLaunchKernel``: a module image
(cubin, fatbin or PTX), the kernel's mangled name, the launch geometry, the raw parameter
bytes with each parameter's offset and size, and the contents before and after the launch of
every device allocation the parameters point into, at their recorded virtual addresses.
The on-disk form is recording format v2 (docs/recording-format.md, docs/recording-native.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
class NativeRecording:
    """One recorded native launch, ready to replay through the driver API."""

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
    identity: Mapping[str, Any] = field(default_factory=dict)
    capture: Mapping[str, Any] = field(default_factory=dict)
    instance: int = 0
    created: str = ""
    kernforge_version: str = ""
    loader: Callable[[str], np.ndarray] | None = field(default=None, compare=False, repr=False)

    backend = "driver"

    @property
    def unit(self) -> str:
        return self.path.name

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
