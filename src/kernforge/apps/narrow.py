"""M3a's later datasets of a kernel try first the candidates that won on its first one.

A kernel recorded on several datasets of one run is matched once per dataset, and each path
(one-launch operator, fused, fused step, lifted) compiles, checks and screens its whole list of
candidates each time. The ranking rarely changes from one dataset to another, so a unit whose
kernel was already matched on an earlier dataset of the run tries only what ranked best there
(``[integrate] narrow_after_first = K``; 0: every dataset tries everything):

- :func:`ranked`: a path's screened candidates (its result's ``tried`` rows that passed the
  recorded-state check and were timed), fastest first; kept in the unit's row (``ranked``);
- :func:`preferred`: from that ranking, the ``K`` best; for fusion the ``K`` best ``(T,
  operator)`` pairs plus, for every ``T``, the best operator of that ``T`` (so a different ``T``
  can still win on the new dataset);
- :func:`keep`: what a GPU child tries of its candidates given the preferred ones (all of them
  when none of its candidates is preferred).

When none of the preferred candidates passes its checks on the later dataset the path is tried
again with the full list (:mod:`kernforge.apps.strategies.narrowing`), so narrowing never
refuses a path.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

FUSED = ("fused", "fused step")  # the paths whose candidates are (T, operator) pairs
PATHS = ("one-launch", *FUSED, "lifted")

Key = Any  # an operator key (str), or [T, key] for fusion


def _key(row: dict[str, Any], fused: bool) -> Key | None:
    op = row.get("operator")
    if not isinstance(op, str):
        return None
    if not fused:
        return op
    steps = row.get("steps")
    return [int(steps), op] if isinstance(steps, int) and not isinstance(steps, bool) else None


def ranked(tried: Iterable[dict[str, Any]], fused: bool) -> list[list[Any]]:
    """``[key, screen speedup]`` of each screened candidate of ``tried`` (a path result's rows:
    those with a ``screen_speedup`` that no check refused), fastest first, ties by key (the
    order is deterministic)."""
    out: list[tuple[float, str, Key]] = []
    for row in tried:
        if not isinstance(row, dict) or "refused" in row:
            continue
        s, k = row.get("screen_speedup"), _key(row, fused)
        if k is None or not isinstance(s, (int, float)) or isinstance(s, bool) \
                or not math.isfinite(s):
            continue
        out.append((float(s), repr(k), k))
    out.sort(key=lambda x: (-x[0], x[1]))
    return [[k, round(s, 4)] for s, _, k in out]


def preferred(ranking: Sequence[Sequence[Any]], k: int, fused: bool) -> list[Key]:
    """The candidates a later dataset tries from an earlier one's ``ranking`` (:func:`ranked`):
    the ``k`` best, and for fusion also each ``T``'s best, in ranking order."""
    keys = [r[0] for r in ranking if r]
    chosen = keys[:k]
    if fused:
        for key in keys:
            if key[0] not in {c[0] for c in chosen}:
                chosen.append(key)
    return [list(c) if fused else c for c in chosen]


T = TypeVar("T")


def keep(items: Sequence[T], prefer: Sequence[Any] | None, key: Callable[[T], Any]
         ) -> list[T]:
    """The items whose ``key`` is preferred, in their own order; all of them when ``prefer``
    is None or names none of them (a preferred design this dataset does not generate)."""
    if not prefer:
        return list(items)
    want = {repr(_norm(p)) for p in prefer}
    got = [it for it in items if repr(_norm(key(it))) in want]
    return got or list(items)


def _norm(k: Any) -> Any:
    return [int(k[0]), str(k[1])] if isinstance(k, (list, tuple)) else str(k)


def first_rankings(row: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The rankings per path of a finished row (a row written before narrowing has none)."""
    got = row.get("ranked")
    if not isinstance(got, dict):
        return {}
    return {p: v for p, v in got.items() if p in PATHS and isinstance(v, list) and v}
