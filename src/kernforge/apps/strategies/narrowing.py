"""M3a's narrowing across datasets (:mod:`kernforge.apps.narrow` says what and why): which
earlier row a unit narrows to, each path's call with its preferred candidates, the fallback
to the full list, and what the row says of it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import narrow

Firsts = dict[str, tuple[str, dict[str, list[list[Any]]]]]


@dataclass(frozen=True)
class Narrowing:
    """A unit's later dataset narrowed to the ``k`` best of ``dataset`` (its ``rankings``
    per path, :func:`kernforge.apps.narrow.ranked`)."""

    dataset: str
    k: int
    rankings: dict[str, list[list[Any]]]

    @property
    def note(self) -> str:
        return f"narrowed to the {self.k} best of {self.dataset}"

    def prefer(self, path: str) -> list[Any] | None:
        """The candidates ``path`` tries, or None (nothing ranked there: all of them)."""
        ranking = self.rankings.get(path)
        if not ranking:
            return None
        return narrow.preferred(ranking, self.k, path in narrow.FUSED) or None


def for_unit(firsts: Firsts, kernel: str, dataset: str, k: int) -> Narrowing | None:
    """The narrowing of ``kernel``'s unit on ``dataset``: to the first dataset of the run
    that matched it (``firsts``), when that is another dataset and ``k`` > 0."""
    got = firsts.get(kernel)
    if k <= 0 or got is None or got[0] == dataset:
        return None
    return Narrowing(got[0], k, got[1])


def remember(firsts: Firsts, kernel: str, dataset: str, row: dict[str, Any]) -> None:
    """Keep ``row``'s rankings as ``kernel``'s first when it is its first matched row that
    has some (a row written before narrowing has none: its later datasets try everything)."""
    if kernel in firsts or not row.get("matched"):
        return
    got = narrow.first_rankings(row)
    if got:
        firsts[kernel] = (dataset, got)


def _key(row: dict[str, Any], fused: bool) -> Any:
    return [row.get("steps"), row.get("operator")] if fused else row.get("operator")


def attempt(n: Narrowing | None, path: str, call: Callable[..., Any], row: dict[str, Any]
            ) -> Any:
    """``call(**kw)``, the path's matcher, with ``prefer`` when ``n`` narrows it; again
    without when none of the preferred candidates passed its checks (a result with no spec
    whose every candidate tried was refused; one that passed and lost at the gate would
    lose there on the full list too). The path's ranking goes into ``row["ranked"]``, the
    narrowing into ``row["narrowed"]``."""
    prefer = n.prefer(path) if n is not None else None
    got = call(prefer=prefer) if prefer else call()
    fused = path in narrow.FUSED
    if prefer and n is not None:
        info: dict[str, Any] = {"preferred": prefer,
                                "tried": [_key(t, fused) for t in getattr(got, "tried", ())]}
        tried = getattr(got, "tried", ())
        if not hasattr(got, "spec_path") and tried and all("refused" in t for t in tried):
            info["fallback"] = f"none of them passed ({got.reason}): the full list tried"
            got = call()
        paths = row.setdefault("narrowed", {"from": n.dataset, "k": n.k, "note": n.note,
                                            "paths": {}})["paths"]
        paths[path] = info
    ranking = narrow.ranked(getattr(got, "tried", ()) or (), fused)
    if ranking:
        row.setdefault("ranked", {})[path] = ranking
    return got


def merge(row: dict[str, Any], pre: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the rankings and narrowing of ``pre`` (a path tried before the row was
    made) added."""
    if pre.get("ranked"):
        row["ranked"] = {**pre["ranked"], **row.get("ranked", {})}
    if pre.get("narrowed"):
        got = row.setdefault("narrowed", {**pre["narrowed"], "paths": {}})
        got["paths"] = {**pre["narrowed"]["paths"], **got["paths"]}
    return row
