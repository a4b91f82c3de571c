"""Source normalization (no-op and duplicate detection) and the feature dimensions of MAP-Elites.

Default features mean something for kernels:

- ``code_size``: non-blank, non-comment source lines;
- ``num_regs``: registers per thread, when the evaluation reports them (``extra['num_regs']``),
  a proxy for occupancy;
- ``bandwidth``: achieved bandwidth in GB/s, ``bytes_moved / fitness``, when the caller says how
  many bytes one launch moves (``bytes_moved``, or ``extra['bytes_moved']``).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernforge.core import ConfigError

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_SPACE = re.compile(r"\s+")
_PUNCT_SPACE = re.compile(r"\s*([{}()\[\];,=+\-*/<>&|!?:^%])\s*")


def strip_comments(code: str) -> str:
    return _COMMENTS.sub(" ", code)


def normalize_code(code: str) -> str:
    """The code without comments and with whitespace canonicalized (not removed between words)."""
    text = _SPACE.sub(" ", strip_comments(code)).strip()
    return _PUNCT_SPACE.sub(r"\1", text)


def code_hash(code: str) -> str:
    return hashlib.sha256(normalize_code(code).encode()).hexdigest()


def code_size(code: str) -> int:
    """Non-blank, non-comment lines."""
    return sum(1 for line in strip_comments(code).splitlines() if line.strip())


def default_features(code: str, fitness: float | None, extra: Mapping[str, Any],
                     bytes_moved: float | None = None) -> dict[str, float]:
    out: dict[str, float] = {"code_size": float(code_size(code))}
    if "num_regs" in extra:
        out["num_regs"] = float(extra["num_regs"])
    moved = bytes_moved if bytes_moved is not None else extra.get("bytes_moved")
    if moved is not None and fitness:
        out["bandwidth"] = float(moved) / fitness / 1e9
    return out


@dataclass(frozen=True)
class FeatureDim:
    """One axis of the MAP-Elites grid.

    ``mode='fixed'``: ``bins`` equal bins over [lo, hi) (values outside clamp to the ends).
    ``mode='quantile'``: ``bins`` bins whose edges are the quantiles of the values seen so far,
    refitted at each migration epoch (until then the fixed bins are used).
    A program without this feature falls in bin 0.
    """

    name: str
    lo: float = 0.0
    hi: float = 1.0
    bins: int = 4
    mode: str = "fixed"

    def __post_init__(self) -> None:
        if self.mode not in ("fixed", "quantile"):
            raise ConfigError(f"feature {self.name!r}: mode={self.mode!r} is not fixed|quantile",
                              hint="use mode='fixed' or mode='quantile'")
        if self.bins < 1 or not self.hi > self.lo:
            raise ConfigError(f"feature {self.name!r}: need bins >= 1 and hi > lo",
                              hint="for example FeatureDim('code_size', 0, 200, 4)")

    def fixed_edges(self) -> list[float]:
        step = (self.hi - self.lo) / self.bins
        return [self.lo + step * i for i in range(1, self.bins)]

    def bin(self, value: float | None, edges: Sequence[float] | None = None) -> int:
        if value is None:
            return 0
        return bisect.bisect_right(list(edges if edges is not None else self.fixed_edges()),
                                   value)

    def quantile_edges(self, values: Sequence[float]) -> list[float]:
        vals = sorted(values)
        if len(vals) < self.bins:
            return self.fixed_edges()
        return [vals[min(len(vals) - 1, (len(vals) * i) // self.bins)]
                for i in range(1, self.bins)]


DEFAULT_DIMS: tuple[FeatureDim, ...] = (
    FeatureDim("code_size", 0.0, 200.0, 4),
    FeatureDim("num_regs", 0.0, 128.0, 4),
    FeatureDim("bandwidth", 0.0, 4000.0, 4),
)
