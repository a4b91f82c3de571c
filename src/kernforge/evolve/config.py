"""The evolution run's configuration: frozen dataclasses validated on construction; dictionaries
(from YAML/TOML later) are accepted only with known keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kernforge.core import ConfigError
from kernforge.core.strict import field_names, strict_keys

from .features import FeatureDim
from .mapelites import MapElitesConfig


def _known(cls: type, data: Mapping[str, Any], where: str) -> None:
    strict_keys(data, field_names(cls), where)


@dataclass(frozen=True)
class EvolveConfig:
    """How long to run and how wide.

    ``eval_slots`` evaluations and ``llm_slots`` proposals run at once; at most
    ``max_in_flight`` iterations (default: their sum) are between planning and being applied.
    Results are applied in iteration order and iteration ``i + max_in_flight`` is planned right
    after iteration ``i`` is applied, so a run is reproducible from its seed whatever the
    timing. Stops after ``max_iterations`` iterations (all sessions), ``max_seconds`` of this
    session (in-flight work finishes), or ``patience`` applied iterations without a new best.
    """

    seed: int = 0
    max_iterations: int = 100
    max_seconds: float | None = None
    patience: int | None = None
    eval_slots: int = 2
    llm_slots: int = 4
    max_in_flight: int | None = None
    proposer_weights: tuple[float, ...] | None = None
    bytes_moved: float | None = None
    contract: str = ""
    mapelites: MapElitesConfig = field(default_factory=MapElitesConfig)

    def __post_init__(self) -> None:
        for name in ("max_iterations", "eval_slots", "llm_slots"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{name}={v!r} must be a positive integer")
        for name in ("patience", "max_in_flight"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ConfigError(f"{name}={v!r} must be a positive integer or None")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ConfigError(f"max_seconds={self.max_seconds!r} must be > 0 or None")
        if self.proposer_weights is not None and (
                not self.proposer_weights or min(self.proposer_weights) < 0
                or sum(self.proposer_weights) <= 0):
            raise ConfigError(f"proposer_weights={self.proposer_weights!r} must be "
                              "non-negative with a positive sum")

    @property
    def window(self) -> int:
        return self.max_in_flight or (self.eval_slots + self.llm_slots)

    def identity(self) -> dict[str, Any]:
        """What must not change when a run resumes (it would break reproducibility)."""
        me = self.mapelites
        return {"seed": self.seed, "window": self.window, "islands": me.islands,
                "dims": [dataclasses.asdict(d) for d in me.dims],
                "migration_interval": me.migration_interval,
                "migration_fraction": me.migration_fraction,
                "ratios": [me.exploration, me.exploitation, me.elite],
                "inspirations": me.inspirations}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvolveConfig:
        """Build from plain data; an unknown key anywhere raises ConfigError naming it."""
        _known(cls, data, "evolve config")
        kw = dict(data)
        if isinstance(kw.get("mapelites"), Mapping):
            me = dict(kw["mapelites"])
            _known(MapElitesConfig, me, "mapelites")
            if "dims" in me:
                dims = []
                for d in me["dims"]:
                    _known(FeatureDim, d, "mapelites.dims")
                    dims.append(FeatureDim(**d))
                me["dims"] = tuple(dims)
            kw["mapelites"] = MapElitesConfig(**me)
        if kw.get("proposer_weights") is not None:
            kw["proposer_weights"] = tuple(float(w) for w in kw["proposer_weights"])
        return cls(**kw)
