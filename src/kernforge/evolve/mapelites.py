"""MAP-Elites with islands: a grid of cells per island, each holding its fastest valid program.

Pure in-memory logic driven by an injected ``random.Random``; the controller persists every
change through the store. Iteration orders are sorted so that the same RNG state always gives
the same choice (resume reproduces an uninterrupted run).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kernforge.core import ConfigError

from .features import DEFAULT_DIMS, FeatureDim
from .types import Program


@dataclass(frozen=True)
class MapElitesConfig:
    """Islands, grid, migration and parent selection.

    Parent selection draws ``exploration`` (a random occupied cell), ``exploitation``
    (fitness-weighted among the island's elites) or ``elite`` (the island's best); the three
    ratios must sum to 1. Every ``migration_interval`` iterations, the top
    ``migration_fraction`` of each island's elites (at least one) is copied to the next island
    of the ring.
    """

    islands: int = 4
    dims: tuple[FeatureDim, ...] = DEFAULT_DIMS
    migration_interval: int = 20
    migration_fraction: float = 0.1
    exploration: float = 0.2
    exploitation: float = 0.7
    elite: float = 0.1
    inspirations: int = 3

    def __post_init__(self) -> None:
        if self.islands < 1 or self.migration_interval < 1 or self.inspirations < 0:
            raise ConfigError("islands and migration_interval must be >= 1, inspirations >= 0")
        if not 0 < self.migration_fraction <= 1:
            raise ConfigError(f"migration_fraction={self.migration_fraction} must be in (0, 1]")
        ratios = (self.exploration, self.exploitation, self.elite)
        if min(ratios) < 0 or not math.isclose(sum(ratios), 1.0, abs_tol=1e-9):
            raise ConfigError(f"exploration/exploitation/elite = {ratios} must be >= 0 and "
                              "sum to 1", hint="for example 0.2 / 0.7 / 0.1")
        names = [d.name for d in self.dims]
        if len(set(names)) != len(names):
            raise ConfigError(f"feature dimensions repeat a name: {names}")


@dataclass(frozen=True)
class Migration:
    src: int
    dst: int
    program: Program
    cell: str
    accepted: bool


def _better(a: Program, b: Program | None) -> bool:
    """Is ``a`` strictly better than ``b``? Lower fitness wins; ties keep the incumbent."""
    return b is None or (a.fitness is not None and b.fitness is not None
                         and a.fitness < b.fitness)


class Archive:
    """The MAP-Elites grid of every island. ``edges`` holds fitted quantile edges per feature."""

    def __init__(self, config: MapElitesConfig) -> None:
        self.config = config
        self.cells: list[dict[str, Program]] = [{} for _ in range(config.islands)]
        self.edges: dict[str, list[float]] = {}

    # -- cells ----------------------------------------------------------------------------
    def cell_of(self, features: dict[str, float]) -> str:
        return ",".join(str(d.bin(features.get(d.name), self.edges.get(d.name)))
                        for d in self.config.dims)

    def insert(self, island: int, program: Program) -> tuple[bool, str]:
        """Put a valid program in its cell when it beats the incumbent; (accepted, cell)."""
        cell = self.cell_of(program.features)
        if not program.valid:
            return False, cell
        cells = self.cells[island]
        if _better(program, cells.get(cell)):
            cells[cell] = program
            return True, cell
        return False, cell

    def elites(self, island: int) -> list[Program]:
        """The island's elites, fastest first (ties by id)."""
        return sorted(self.cells[island].values(), key=lambda p: (p.fitness or math.inf, p.id))

    def best(self, island: int | None = None) -> Program | None:
        pool = (self.elites(island) if island is not None
                else [e for i in range(self.config.islands) for e in self.elites(i)])
        return min(pool, key=lambda p: (p.fitness or math.inf, p.id), default=None)

    # -- selection ---------------------------------------------------------------------------
    def select_parent(self, island: int, rng: random.Random) -> tuple[Program | None, str]:
        """(parent, how) with how in exploration | exploitation | elite | empty."""
        elites = self.elites(island)
        r = rng.random()
        if not elites:
            return None, "empty"
        c = self.config
        if r < c.exploration:
            cells = sorted(self.cells[island])
            return self.cells[island][rng.choice(cells)], "exploration"
        if r < c.exploration + c.exploitation:
            best = elites[0].fitness or 1.0
            weights = [best / (e.fitness or math.inf) for e in elites]
            return rng.choices(elites, weights=weights, k=1)[0], "exploitation"
        return elites[0], "elite"

    def inspirations(self, island: int, rng: random.Random,
                     exclude: Program | None) -> tuple[Program, ...]:
        pool = [e for e in self.elites(island) if exclude is None or e.id != exclude.id]
        k = min(self.config.inspirations, len(pool))
        return tuple(rng.sample(pool, k)) if k else ()

    # -- migration and re-binning ------------------------------------------------------------
    def migrate(self) -> list[Migration]:
        """Ring migration: the top fraction of each island's elites goes to the next island.
        Emigrants are chosen from a snapshot, so a program moves one hop per epoch."""
        n = self.config.islands
        if n < 2:
            return []
        snapshot = [self.elites(i) for i in range(n)]
        out = []
        for src, elites in enumerate(snapshot):
            k = max(1, math.ceil(len(elites) * self.config.migration_fraction)) if elites else 0
            dst = (src + 1) % n
            for p in elites[:k]:
                accepted, cell = self.insert(dst, p)
                out.append(Migration(src, dst, p, cell, accepted))
        return out

    def refit(self, values: Mapping[str, Sequence[float]],
              programs: Iterable[Program] = ()) -> bool:
        """Refit quantile edges from the values seen and re-bin every island from its elites
        plus ``programs`` (each on its own island). True if the edges changed."""
        new = {d.name: d.quantile_edges(values.get(d.name, ()))
               for d in self.config.dims if d.mode == "quantile"}
        if new == self.edges:
            return False
        self.edges = new
        natives = list(programs)
        for i in range(self.config.islands):
            pool = {p.id: p for p in self.cells[i].values()}
            pool.update({p.id: p for p in natives if p.island == i})
            self.cells[i] = {}
            for p in sorted(pool.values(), key=lambda p: p.id):
                self.insert(i, p)
        return True

    def load(self, cells: dict[int, dict[str, tuple[str, float]]],
             programs: Iterable[Program]) -> None:
        by_id = {p.id: p for p in programs}
        for island, row in cells.items():
            self.cells[island] = {cell: by_id[pid] for cell, (pid, _) in row.items()}
