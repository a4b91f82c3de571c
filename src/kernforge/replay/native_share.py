"""One tuned configuration for the recorded launches of a kernel that differ only in scalars.

A kernel launched with a parameter that changes from launch to launch (a time step, a
coefficient) is recorded as several units (``--max-instances``) and each is tuned on its own;
their winners can differ by noise alone (two block shapes within a percent). ``kernforge export``
writes one entry for units won by the same configuration (:mod:`kernforge.deploy.generalize`),
so that it replaces the other launches too. :func:`share_winners` gives each such group the
chance to agree: the winner of the unit with the surest win (the highest lower CI bound) is
verified on every other unit of the group and compared with its recorded configuration by the
same interleaved protocol, verdict and gate as its own winner; where it passes, it becomes that unit's
winner (the unit's notes say which it replaced). Where it does not, the unit keeps its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core import Tolerance
from ..harness.verdict import NOISE_BAND
from .native_child import judged, run_isolated, unless_faster
from .native_tune import NativeTuning, Refuse, evaluate_all


def _shape(t: NativeTuning) -> tuple[Any, ...]:
    r = t.rec
    return (r.entry, r.image, r.grid, r.block, r.shared_mem,
            tuple((p.offset, p.size) for p in r.params), len(r.param_bytes))


def share_winners(done: Sequence[NativeTuning], *, refuse: Refuse = unless_faster,
                  band: float = NOISE_BAND, passes: int = 7, repeat: int = 10, tolerance: Tolerance | str | None = None,
                  dtype: str | None = None,
                  say: Callable[[str], None] = lambda _: None) -> int:
    """Give the winning units of each kernel launch shape one shared winner where it passes;
    the number of units whose winner changed."""
    groups: dict[tuple[Any, ...], list[NativeTuning]] = {}
    for t in done:
        if t.win:
            groups.setdefault(_shape(t), []).append(t)
    changed = 0
    for wins in groups.values():
        if len(wins) < 2 or len({t.variants[t.best] for t in wins if t.best is not None}) < 2:
            continue
        lead = max(wins, key=lambda t: t.ci[0] if t.ci else 0.0)
        assert lead.best is not None
        shared = lead.variants[lead.best]
        for t in wins:
            if t is lead or t.best is None or t.variants[t.best] == shared:
                continue
            if _adopt(t, shared, refuse=refuse, band=band, passes=passes, repeat=repeat,
                      tolerance=tolerance, dtype=dtype):
                changed += 1
                say(f"  {t.unit.name}: takes {shared.label()} from {lead.unit.name} "
                    f"({t.speedup:.3f}x), one configuration for the kernel's launches")
    return changed


def _adopt(t: NativeTuning, v: Any, *, refuse: Refuse, band: float, passes: int, repeat: int,
           tolerance: Tolerance | str | None, dtype: str | None) -> bool:
    """Verify ``v`` on ``t``'s unit, compare it with the recorded configuration interleaved;
    make it ``t``'s winner when the gate accepts its verdict."""
    if v in t.variants:
        i = t.variants.index(v)
    else:
        t.variants.append(v)
        t.results += evaluate_all(t.unit, [v], repeat=repeat, tolerance=tolerance, dtype=dtype)
        i = len(t.variants) - 1
    if not t.results[i].ok:
        return False
    cmp = run_isolated(t.unit, [t.variants[0], v], repeat=3, warmup=1, compare_pair=(0, 1),
                       passes=passes, tolerance=tolerance, dtype=dtype).get("compare")
    if not cmp:
        return False
    speed = judged(cmp, band)
    if refuse(speed) is not None:
        return False
    assert t.best is not None
    t.notes.append(f"shared winner {v.label()} in place of its own "
                   f"{t.variants[t.best].label()} ({t.speedup:.3f}x)")
    t.best, t.speedup, t.ci, t.speed = i, cmp["speedup"], (cmp["ci"][0], cmp["ci"][1]), speed
    t.medians = (cmp["median_a"], cmp["median_b"])
    return True
