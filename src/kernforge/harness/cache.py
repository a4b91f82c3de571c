"""Which cache state a unit is replayed in: flushed (the default of the protocol) or warm.

A kernel whose data the program had in the cache (a short kernel reading what the launch
before it wrote) replays slower with the cache flushed before every run than it ran in the
program; a search in that state optimizes for a cache state the program never has. So each
unit gets the protocol its program had, decided from the recording (docs/integrity.md, "Cache
state of a replay"):

1. ``warm`` or ``flushed`` given by the user: that (``--cache``);
2. the time the launch took in the program is known and the unit was replayed both ways:
   the protocol whose median is nearer to it (by ratio);
3. else the footprint (the bytes of every buffer the launch reads or writes) against the
   cache (the GPU's L2, the CPU's last-level cache): ``warm`` when it fits in half of it (the
   program had it resident: a launch of the loop that wrote it left it there), ``flushed``
   when it does not or when the cache size is unknown.

Every choice carries its reason, in words the replay, inspect and tune output print.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core import ConfigError

MODES = ("auto", "warm", "flushed")
FITS = 0.5  # the footprint fits when it is at most this fraction of the cache


@dataclass(frozen=True)
class CacheChoice:
    """A unit's replay protocol (``warm`` / ``flushed``), how it was decided and why."""

    protocol: str  # "warm" | "flushed"
    by: str  # "user" | "in-program time" | "footprint" | "default"
    reason: str

    @property
    def flush(self) -> bool:
        return self.protocol == "flushed"

    def to_json(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "by": self.by, "reason": self.reason}

    @classmethod
    def from_json(cls, d: Any) -> CacheChoice | None:
        """The stored choice, or None when ``d`` is not one (a damaged file is ignored)."""
        if (isinstance(d, dict) and d.get("protocol") in ("warm", "flushed")
                and isinstance(d.get("by"), str) and isinstance(d.get("reason"), str)):
            return cls(d["protocol"], d["by"], d["reason"])
        return None


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ConfigError(f"cache mode {mode!r} is not one of {', '.join(MODES)}",
                          hint="--cache auto (each unit as its program had it), warm or flushed")
    return mode


def user_choice(mode: str) -> CacheChoice | None:
    """The choice a ``--cache warm|flushed`` makes for every unit; None for ``auto``."""
    if check_mode(mode) == "auto":
        return None
    return CacheChoice(mode, "user", f"--cache {mode} given")


def _mib(n: float) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 2**10:.3g} KiB"


def by_footprint(footprint: int, cache: int | None, what: str = "cache") -> CacheChoice:
    """Rule 3 of the module docstring."""
    if not cache or cache <= 0:
        return CacheChoice("flushed", "default", f"the {what} size is not known: flushed, the "
                                                 "protocol's default")
    if footprint <= FITS * cache:
        return CacheChoice("warm", "footprint", f"its data ({_mib(footprint)}) fits in the "
                                                f"{what} ({_mib(cache)}): the program had it "
                                                "resident")
    return CacheChoice("flushed", "footprint", f"its data ({_mib(footprint)}) exceeds half the "
                                               f"{what} ({_mib(cache)}): the program read it "
                                               "from memory")


#: flushed and warm replays closer than this are one time: the choice stays the default, so that
#: repeated replays of one unit (or identical units) do not flip between protocols on noise
SAME = 0.03


def by_program_time(in_program_s: float, flushed_s: float, warm_s: float) -> CacheChoice:
    """Rule 2: the protocol whose replay time is nearer, by ratio, to the time in the
    program."""
    if min(in_program_s, flushed_s, warm_s) <= 0 or not all(
            math.isfinite(x) for x in (in_program_s, flushed_s, warm_s)):
        raise ConfigError("times to compare must be positive and finite")
    off = {p: abs(math.log(t / in_program_s)) for p, t in (("flushed", flushed_s),
                                                          ("warm", warm_s))}
    figures = (f"in the program {in_program_s * 1e6:.3g} us; replayed flushed "
               f"{flushed_s * 1e6:.3g} us ({flushed_s / in_program_s:.2f}x), warm "
               f"{warm_s * 1e6:.3g} us ({warm_s / in_program_s:.2f}x)")
    if abs(math.log(flushed_s / warm_s)) < math.log1p(SAME):  # noise decides nothing
        return CacheChoice("flushed", "in-program time",
                           f"{figures}: the two differ by less than {SAME:.0%}, flushed (the "
                           "protocol's default)")
    protocol = min(off, key=lambda p: (off[p], p != "flushed"))
    return CacheChoice(protocol, "in-program time", f"{figures}: {protocol} is nearer")
