"""One replay of any recorded unit (:class:`~kernforge.core.Unit`), whatever recorded it.

What differs between units is what they hold, and so which backend replays them: a unit that
holds a module image (``backend == "driver"``) is replayed by the driver backend at its
recorded addresses, in a child process of its own (:mod:`.native_child`), so a crash costs
that unit only; a unit that holds source only is compiled and replayed by its backend
(:func:`.engine.replay`, in the caller's worker pool). Both run in the cache state chosen for
every unit (:func:`.cache_protocol.choose`) and come back as one row (:class:`UnitReplay`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import ConfigError, LaunchConfig, Measurement, Recording, Tolerance, Unit
from ..core.native import NativeRecording
from ..harness.cache import CacheChoice
from .cache_protocol import choose
from .isolate import Isolation

DRIVER = "driver"  # the backend of the units that hold a module image


@dataclass(frozen=True)
class ReplayRequest:
    """How every unit is replayed. ``options``, ``defines``, ``threads``: overrides a source
    build takes (a module image is replayed as recorded); ``tolerance``: one policy for every
    written buffer, or per buffer name (a unit holding an image has no buffer names: one
    policy, its memory compared as ``dtype``, by default the kernel's pointer element type)."""

    options: Mapping[str, Any] | None = None
    defines: Mapping[str, Any] | None = None
    threads: int | None = None
    tolerance: Tolerance | dict[str, Tolerance] | None = None
    dtype: str | None = None
    warmup: int = 3
    repeat: int = 10

    def check(self, units: list[Unit]) -> None:
        """Refuse, before anything runs, what a unit to replay cannot take."""
        if isinstance(self.tolerance, dict) and any(u.backend == DRIVER for u in units):
            raise ConfigError("a native unit's memory has no buffer names: --tolerance "
                              "BUF=SPEC does not apply to it",
                              hint="give one --tolerance SPEC (with --dtype) for native "
                                   "units; select the others with --kernels")


@dataclass(frozen=True)
class UnitReplay:
    """One unit replayed: its measurement in the cache state it ran in; ``placement``, for a
    unit replayed at its recorded addresses: the regions ``relocated`` elsewhere and the
    driver calls it ``refused``."""

    unit: str
    kernel: str
    measurement: Measurement
    cache: CacheChoice
    in_program_s: float | None = None
    placement: Mapping[str, Any] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        """What ``replay --json`` writes beside the measurement."""
        out: dict[str, Any] = {}
        if self.placement:
            ms = self.in_program_s
            out = {"relocated": list(self.placement.get("relocated") or []),
                   "refusals": list(self.placement.get("refusals") or []),
                   "app_time_ms": ms * 1e3 if ms is not None else None}
        return {**out, "cache": self.cache.to_json()}


def _once(unit: Unit, flush: bool, req: ReplayRequest, isolate: Isolation | None
          ) -> tuple[Measurement, dict[str, Any]]:
    """One replay of ``unit`` by the backend it needs, and where its memory was placed."""
    if isinstance(unit, NativeRecording):  # backend "driver": the module image
        from .native import NativeVariant
        from .native_child import run_isolated

        tol = req.tolerance if isinstance(req.tolerance, Tolerance) else None
        out = run_isolated(unit.path, [NativeVariant()], warmup=req.warmup,
                           repeat=req.repeat, tolerance=tol, dtype=req.dtype, flush=flush)
        return out["measurements"][0], {"relocated": out.get("relocated") or [],
                                        "refusals": out.get("refusals") or []}
    if not isinstance(unit, Recording):
        raise ConfigError(f"{unit.path}: no backend replays a unit of type "
                          f"{type(unit).__name__}", hint="record it with kernforge record")
    launch = (LaunchConfig(unit.launch.grid, unit.launch.block, unit.launch.shared_mem,
                           req.threads) if req.threads is not None else None)
    from .engine import replay

    m = replay(unit, options=req.options, defines=req.defines, launch=launch,
               tolerance=req.tolerance, warmup=req.warmup, repeat=req.repeat, flush=flush,
               isolate=isolate)
    return m, {}


def replay_unit(unit: Unit, req: ReplayRequest, *, cache: str | None = None,
                isolate: Isolation | None = None) -> UnitReplay:
    """``unit`` replayed, verified and timed in its cache state (``cache``: ``--cache`` as
    given; None keeps the unit's kept choice, :func:`.cache_protocol.choose`). Data found
    damaged raises its RecordingError."""
    done: dict[bool, tuple[Measurement, dict[str, Any]]] = {}

    def seconds(flush: bool) -> float | None:
        done[flush] = _once(unit, flush, req, isolate)
        m = done[flush][0]
        return m.median if m.ok else None

    choice = choose(unit, cache, seconds)
    if choice.flush not in done:
        seconds(choice.flush)
    m, placement = done[choice.flush]
    return UnitReplay(unit.unit, unit.kernel, m, choice, unit.in_program_s, placement)
