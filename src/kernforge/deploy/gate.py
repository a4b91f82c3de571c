"""Which measured wins may be exported, deployed or kept by the demo: one rule, applied by
every producer (``kernforge tune``/``evolve`` results, the demo) and checked again by every
consumer (``kernforge export``, :func:`kernforge.deploy.use`).

A win counts when

1. it was **verified** (every integrity gate passed: ``replay.validate`` accepted it);
2. its speed verdict is **faster** (:mod:`kernforge.harness.verdict`, the one vocabulary of
   every command): measured on an idle device, and the distribution-free interval of the
   interleaved ratio (median of per-pass ratios; ``CONFIDENCE`` = 99% over the looks its
   measurement took) lies above ``1 + band``, ``band`` the noise band (``NOISE_BAND`` = 2%).
   "Not faster" and "inconclusive" (busy, or an interval that straddles the band) never
   count, and the reason is the verdict's own words.

:func:`refusal` says why a win does not count (None when it does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.verdict import NOISE_BAND, Judgement, judge_evidence

__all__ = ["NOISE_BAND", "idle_of", "refusal", "speed_of"]


def refusal(*, verified: bool | None, idle: bool | None, speedup: float | None,
            ci: tuple[float, float] | None, band: float = NOISE_BAND,
            utilisation: float | None = None, require_ci: bool = True) -> str | None:
    """Why this win must not be exported, deployed or kept; None when it may.
    ``require_ci=False`` (a deployment reading a spec): only what the evidence states counts
    against it; an entry without an interval (a spec made by hand or by the library) is
    checked by the first-launch re-verification alone."""
    if verified is False:
        return "not verified (an integrity gate rejected it, or it was never validated)"
    if idle is not False and (speedup is None or ci is None) and not require_ci:
        return None
    verdict = judge_evidence(speedup, ci, idle=idle, utilisation=utilisation, band=band)
    return None if verdict.faster else verdict.reason


def idle_of(validation: Mapping[str, Any] | None) -> tuple[bool | None, float | None]:
    """(idle, utilisation) from a validation's JSON (``Validation.to_json``)."""
    idle = validation.get("idle") if isinstance(validation, Mapping) else None
    if not isinstance(idle, Mapping):
        return None, None
    util = idle.get("utilisation")
    return idle.get("idle"), float(util) if isinstance(util, (int, float)) else None


def speed_of(validation: Mapping[str, Any] | None) -> Judgement | None:
    """The speed verdict a validation's JSON holds (``Validation.to_json``; None before it
    had one): a consumer honours it as well as the figures (the noise check it drew on is not
    in them)."""
    speed = validation.get("speed") if isinstance(validation, Mapping) else None
    if not isinstance(speed, Mapping):
        return None
    try:
        return Judgement.from_json(speed)
    except (KeyError, TypeError, ValueError):
        return None
