"""Which measured wins may be exported, deployed or kept by the demo: one rule, applied by
every producer (``kernforge tune``/``evolve`` results, the demo) and checked again by every
consumer (``kernforge export``, :func:`kernforge.deploy.use`).

A win counts when

1. it was **verified** (every integrity gate passed: ``replay.validate`` accepted it);
2. it was measured on an **idle device** (the idle check before the canonical interleaved
   re-measurement did not find the device busy; a check that could not run is stated, not
   refused);
3. it is **significant**: the lower end of the 95% confidence interval of the interleaved
   ratio (median of per-pass ratios, bootstrap) is above ``1 + band``, where ``band`` is the
   noise band: ``NOISE_BAND`` = 2% by default, the run-to-run spread an unchanged kernel shows
   between interleaved measurements on a quiet machine (so a 1.001x is never a win).

:func:`refusal` says why a win does not count (None when it does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NOISE_BAND = 0.02


def refusal(*, verified: bool | None, idle: bool | None, speedup: float | None,
            ci: tuple[float, float] | None, band: float = NOISE_BAND,
            utilisation: float | None = None, require_ci: bool = True) -> str | None:
    """Why this win must not be exported, deployed or kept; None when it may.
    ``require_ci=False`` (a deployment reading a spec): only what the evidence states counts
    against it; an entry without an interval (a spec made by hand or by the library) is
    checked by the first-launch re-verification alone."""
    if verified is False:
        return "not verified (an integrity gate rejected it, or it was never validated)"
    if idle is False:
        busy = f" ({utilisation:.0%} busy)" if utilisation is not None else ""
        return (f"measured while the device was busy{busy}: re-run it on an idle machine")
    if speedup is None or ci is None:
        return None if not require_ci else \
            "no interleaved measurement with a confidence interval"
    if not ci[0] > 1.0 + band:
        return (f"not significant: interleaved speedup {speedup:.3f}x [95% CI {ci[0]:.3f}, "
                f"{ci[1]:.3f}], whose lower end is not above 1 + the {band:.0%} noise band")
    return None


def idle_of(validation: Mapping[str, Any] | None) -> tuple[bool | None, float | None]:
    """(idle, utilisation) from a validation's JSON (``Validation.to_json``)."""
    idle = validation.get("idle") if isinstance(validation, Mapping) else None
    if not isinstance(idle, Mapping):
        return None, None
    util = idle.get("utilisation")
    return idle.get("idle"), float(util) if isinstance(util, (int, float)) else None
