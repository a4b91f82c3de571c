"""The one judgement of a measured speed: **faster**, **not faster** or **inconclusive**.

Every command that judges a speed (validate, tune, evolve, export, deploy, app) goes through
:func:`judge` (an interleaved comparison in hand) or :func:`judge_evidence` (the figures a
result file kept), and prints :attr:`Judgement.reason`.

- **faster**: the device was not found busy, the runs measure the kernel (one side's runs
  within a pass spread by at most ``NOISE_LIMIT``), and the distribution-free interval of the
  median per-pass ratio (:func:`median_ci`, the sign test inverted: most passes must
  agree, whatever the shape of the noise) lies above ``1 + band``.
- **not faster**: the interval's upper end is below ``1 + band``. ``slower`` when it is below
  ``1 - band`` as well: a regression, the only case a gate may reject for speed.
- **inconclusive**: the device was busy before or during the measurement, the runs spread
  more than ``NOISE_LIMIT`` within a pass or a side's typical run lies more than
  ``DRIFT_LIMIT`` above its fastest (load the idle probe did not see; not where the interval
  lies :func:`far_beyond` the band: no load makes a kernel 4.9x faster than itself), the
  interval spans more than ``MAX_WIDTH`` (the passes disagree) while an end of it lies
  within ``MAX_WIDTH`` of the band (a 6x [5.8, 10.5] is faster whatever the load did), the
  passes were too few for an interval at the confidence asked for, or the interval straddles
  ``1 + band`` after the passes the budget allowed (adaptive rounds: :func:`~.compare.interleave` with ``max_passes``, each
  look at the confidence :func:`per_look` gives, so looking again buys no significance). No
  gate accepts or rejects on it; the reason says what to do.

``CONFIDENCE`` = 99%: the chance that a comparison of a kernel with itself is called faster or
slower, over all the looks of its adaptive rounds together (:func:`looks`: the first look at
the fewest passes that reach the per-look confidence, 10 for the usual 7 passes up to 21).

``band`` is the noise band: ``NOISE_BAND`` = 2%, the run-to-run spread an unchanged kernel
shows between interleaved measurements on a quiet machine (so a 1.001x is never "faster").
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError

NOISE_BAND = 0.02
CONFIDENCE = 0.99
#: the largest typical spread of one side's runs within a pass (max / min - 1, the median over
#: passes and sides) at which the runs still measure the kernel rather than the machine's load
NOISE_LIMIT = 0.25
#: the widest interval (high / low) a verdict is drawn from: wider, the passes disagree
MAX_WIDTH = 1.5
#: the most a side's typical run may take beyond its fastest run of the same comparison
#: (median / min - 1): more, and most runs measured a load that came and went between passes
DRIFT_LIMIT = 0.5


class Verdict(str, enum.Enum):
    """The three verdicts; the value is what every command prints."""

    FASTER = "faster"
    NOT_FASTER = "not faster"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True)
class Judgement:
    """A verdict with the figures it was drawn from and the reason, in words."""

    verdict: Verdict
    reason: str
    speedup: float | None = None
    ci: tuple[float, float] | None = None
    slower: bool = False  # not faster, and conclusively below 1 - band
    band: float = NOISE_BAND
    passes: int = 0

    @property
    def faster(self) -> bool:
        return self.verdict is Verdict.FASTER

    @property
    def conclusive(self) -> bool:
        return self.verdict is not Verdict.INCONCLUSIVE

    def headline(self) -> str:
        """``faster 1.213x [1.180, 1.250]`` (the figures when there are any)."""
        if self.speedup is None or self.ci is None:
            return self.verdict.value
        return (f"{self.verdict.value} {self.speedup:.3f}x "
                f"[{self.ci[0]:.3f}, {self.ci[1]:.3f}]")

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.value, "reason": self.reason, "speedup": self.speedup,
                "ci": list(self.ci) if self.ci else None, "slower": self.slower,
                "band": self.band, "passes": self.passes}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Judgement:
        ci = doc.get("ci")
        return cls(Verdict(doc["verdict"]), str(doc.get("reason", "")), doc.get("speedup"),
                   (float(ci[0]), float(ci[1])) if ci else None, bool(doc.get("slower")),
                   float(doc.get("band", NOISE_BAND)), int(doc.get("passes", 0)))


def median_ci(samples: Sequence[float], *, confidence: float = CONFIDENCE
              ) -> tuple[float, float, float]:
    """A distribution-free confidence interval of the median: ``(low, high, coverage)``.

    ``low`` and ``high`` are the k-th smallest and k-th largest samples, k the largest rank
    whose two-sided binomial tail (n trials, p = 1/2) stays within ``1 - confidence``;
    ``coverage`` is the interval's exact confidence. With too few samples for ``confidence``
    (fewer than 8 at 99%) the interval is the whole range and ``coverage`` says how little
    that is worth: callers must not conclude from it."""
    a = sorted(float(x) for x in samples)
    if not a:
        raise ConfigError("the confidence interval of no samples is undefined",
                          hint="measure at least one pass")
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence={confidence} must be between 0 and 1",
                          hint="use e.g. 0.99")
    n = len(a)
    tail = (1.0 - confidence) / 2.0
    cdf = 0.0  # P(X <= k - 1), X ~ Binomial(n, 1/2)
    k = 0
    for j in range(n // 2 + 1):
        nxt = cdf + math.comb(n, j) / 2.0 ** n
        if nxt > tail:
            break
        cdf, k = nxt, j + 1
    if k == 0:  # not even the range reaches the confidence asked for
        return float(a[0]), float(a[-1]), 1.0 - 2.0 / 2.0 ** n if n > 1 else 0.0
    return float(a[k - 1]), float(a[n - k]), 1.0 - 2.0 * cdf


def min_passes(confidence: float = CONFIDENCE) -> int:
    """The fewest passes whose range reaches ``confidence`` by :func:`median_ci`'s rule (both
    extreme ranks outside the two-sided tail: ``2 / 2**n <= 1 - confidence``): 8 at 99%."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence={confidence} must be between 0 and 1",
                          hint="use e.g. 0.99")
    n = 1
    while 1.0 / 2.0 ** n > (1.0 - confidence) / 2.0:
        n += 1
    return n


def ci_label(confidence: float | None) -> str:
    """``99% CI`` (``99.67% CI`` for a look of three at 99%); ``CI`` when not known (figures a
    result file kept without it)."""
    if confidence is None:
        return "CI"
    return f"{confidence * 100:.4g}% CI"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _busy_reason(utilisation: float | None, what: str, device: str = "the device") -> str:
    busy = f" ({utilisation:.0%} busy)" if utilisation is not None else ""
    return (f"inconclusive: {device} was busy{busy} {what}; measure again on an idle "
            f"machine")


def judge_evidence(speedup: float | None, ci: tuple[float, float] | None, *,
                   idle: bool | None = None, utilisation: float | None = None,
                   band: float = NOISE_BAND, passes: int = 0,
                   coverage: float | None = None,
                   confidence: float | None = None, device: str = "the device") -> Judgement:
    """The verdict on the figures of one interleaved comparison (see the module docstring).
    ``confidence``: the interval's (None: not known, e.g. figures a result file kept; the
    reason then names no number). ``coverage``: given when the interval falls short of
    ``confidence`` (too few passes): then nothing is concluded. ``device``: what the idle
    check looked at, as the busy reason names it (``the GPU (nvidia-smi ...)``)."""
    edge = 1.0 + band
    if idle is False:
        return Judgement(Verdict.INCONCLUSIVE, _busy_reason(utilisation, "while it was "
                         "measured", device), speedup, ci, band=band, passes=passes)
    if speedup is None or ci is None:
        return Judgement(Verdict.INCONCLUSIVE, "inconclusive: no interleaved measurement with "
                         "a confidence interval", speedup, ci, band=band, passes=passes)
    figures = f"{speedup:.3f}x [{ci_label(confidence)} {ci[0]:.3f}, {ci[1]:.3f}]"
    if coverage is not None:  # given only when below the confidence asked for
        asked = CONFIDENCE if confidence is None else confidence
        return Judgement(Verdict.INCONCLUSIVE, f"inconclusive: {passes} passes are too few "
                         f"for a {asked * 100:.4g}% interval (the range covers "
                         f"{coverage:.1%}); measure with at least {min_passes(asked)}",
                         speedup, ci, band=band, passes=passes)
    # A load change spreads the passes by up to MAX_WIDTH; an interval whose every end is
    # farther than that from the band keeps its verdict whatever the load did.
    if ci[0] <= 0 or (ci[1] / ci[0] > MAX_WIDTH and not far_beyond(ci, band)):
        return Judgement(Verdict.INCONCLUSIVE, f"inconclusive: {figures}: the passes disagree "
                         f"(the interval spans more than {MAX_WIDTH:g}x): the load changed "
                         f"during the measurement; measure again on an idle machine", speedup,
                         ci, band=band, passes=passes)
    faster, below = ci[0] > edge, ci[1] < edge
    slower = ci[1] < 1.0 - band
    if faster:
        return Judgement(Verdict.FASTER, f"faster: {figures}, the interval above 1 + the "
                         f"{band:.0%} noise band", speedup, ci, band=band, passes=passes)
    if below:
        what = (f"slower beyond the {band:.0%} noise band" if slower else
                f"the interval's upper end is not above 1 + the {band:.0%} noise band")
        return Judgement(Verdict.NOT_FASTER, f"not faster: {figures}, {what}", speedup, ci,
                         slower=slower, band=band, passes=passes)
    more = f" after {passes} passes" if passes else ""
    return Judgement(Verdict.INCONCLUSIVE, f"inconclusive: {figures}{more}: the interval "
                     f"straddles 1 + the {band:.0%} noise band; measure again on a quieter "
                     f"machine or with more passes", speedup, ci, band=band, passes=passes)


def per_look(looks: int) -> float:
    """The confidence of each of ``looks`` looks at a growing measurement, so that the chance
    that any of them errs stays within ``1 - CONFIDENCE`` (Bonferroni: adaptive rounds must
    not buy significance by looking again)."""
    return 1.0 - (1.0 - CONFIDENCE) / max(1, looks)


@dataclass(frozen=True)
class Looks:
    """When an interleaved comparison looks at its passes (:func:`looks`)."""

    first: int  # passes at the first look
    step: int  # passes added before each later look
    limit: int  # the most passes in all
    count: int  # the looks taken at most: the Bonferroni count
    confidence: float  # of each look: per_look(count)

    def at(self) -> list[int]:
        """The passes at each look: ``[10, 17, 21]`` for 7 passes up to 21."""
        out = [self.first]
        while out[-1] < self.limit:
            out.append(min(out[-1] + self.step, self.limit))
        return out


def looks(passes: int, max_passes: int | None = None, *, judged: bool = True) -> Looks:
    """The looks of a comparison of ``passes`` passes a block, up to ``max_passes`` (None:
    one block): the first at ``max(passes, min_passes(per-look confidence))``, so that it can
    conclude, then ``passes`` more per look up to ``max_passes`` (raised to the first look
    when below it). The per-look confidence is Bonferroni's over the looks actually taken.
    ``judged=False`` (an estimate no verdict is drawn from): the first look at ``passes``.

    More looks ask more of each, which moves the first look later and may leave fewer looks:
    the schedule is the one planned for the least ``n`` whose schedule takes at most ``n``
    looks, and the confidence is Bonferroni's over the looks it takes (its first look has
    passes enough for that confidence, planned as it was for ``n`` looks)."""
    top = passes if max_passes is None else max_passes
    if passes < 1 or top < passes:
        raise ConfigError(f"passes={passes} and max_passes={max_passes} must be >= 1 "
                          f"(max_passes >= passes)",
                          hint="the defaults are 7 passes, up to 21 while inconclusive")
    n = 1
    while True:
        first = max(passes, min_passes(per_look(n))) if judged else passes
        limit = max(top, first)
        taken = 1 + -(-(limit - first) // passes)
        if taken <= n:
            return Looks(first, passes, limit, taken, per_look(taken))
        n += 1


def judge(ratios: Sequence[float], *, idle: bool | None = None,
          utilisation: float | None = None, band: float = NOISE_BAND,
          confidence: float = CONFIDENCE, device: str = "the device") -> Judgement:
    """The verdict on the per-pass ratios of one interleaved comparison, in pass order, with
    the distribution-free interval at ``confidence``."""
    if not ratios:
        return judge_evidence(None, None, idle=idle, utilisation=utilisation, band=band,
                              confidence=confidence, device=device)
    lo, hi, coverage = median_ci(ratios, confidence=confidence)
    return judge_evidence(median(ratios), (lo, hi), idle=idle, utilisation=utilisation,
                          band=band, passes=len(ratios),
                          coverage=coverage if coverage < confidence else None,
                          confidence=confidence, device=device)


def spread_of(samples_a: Sequence[Sequence[float]], samples_b: Sequence[Sequence[float]]
              ) -> float | None:
    """The typical spread of one side's runs within a pass: per pass and side with at least
    two runs, ``max / min - 1``; their median (None with one run a pass)."""
    spreads = [max(p) / min(p) - 1.0 for side in (samples_a, samples_b) for p in side
               if len(p) >= 2 and min(p) > 0]
    return median(spreads) if spreads else None


def drift_of(samples_a: Sequence[Sequence[float]], samples_b: Sequence[Sequence[float]]
             ) -> float | None:
    """How far a side's typical run lies above its fastest: per side, the median of all its
    runs over their minimum, less 1; the larger of the two (None without runs)."""
    drifts = []
    for side in (samples_a, samples_b):
        runs = [t for p in side for t in p]
        if runs and min(runs) > 0:
            drifts.append(median(runs) / min(runs) - 1.0)
    return max(drifts) if drifts else None


def far_beyond(ci: tuple[float, float], band: float = NOISE_BAND) -> bool:
    """Whether an interval lies wholly farther than ``MAX_WIDTH`` beyond the noise band, in
    one direction: no load makes a kernel that much faster or slower than itself, so the
    width, spread and drift rules leave such an interval its verdict (a 5.5x [4.9, 6.6]
    measured while a side's runs spread by 33% is faster all the same)."""
    return ci[0] > (1.0 + band) * MAX_WIDTH or 0 < ci[1] < (1.0 - band) / MAX_WIDTH


def judge_ab(ab: Any, *, idle: bool | None = None, utilisation: float | None = None,
             band: float = NOISE_BAND, device: str = "the device") -> Judgement:
    """The verdict on an :class:`~.compare.ABResult`: its own interval, at the confidence it
    was taken with (``ab.confidence``). Runs of one side that spread by more than
    ``NOISE_LIMIT`` within a pass, or whose typical run takes more than ``DRIFT_LIMIT`` beyond
    the side's fastest (a load that changed between passes, which the per-pass spread does not
    see), measure the load, not the kernel: inconclusive, unless the interval lies
    :func:`far_beyond` the band. An ABResult that does not say its confidence (older result
    files) is taken at ``CONFIDENCE``. ``device``: what the idle check looked at."""
    conf = getattr(ab, "confidence", None) or CONFIDENCE
    label = ci_label(conf)
    far = far_beyond((ab.ci_low, ab.ci_high), band)
    spread = spread_of(ab.samples_a, ab.samples_b)
    if idle is not False and spread is not None and spread > NOISE_LIMIT and not far:
        return Judgement(Verdict.INCONCLUSIVE, f"inconclusive: {ab.speedup:.3f}x [{label} "
                         f"{ab.ci_low:.3f}, {ab.ci_high:.3f}], but the runs of one side "
                         f"differ by {spread:.0%} within a pass (more than "
                         f"{NOISE_LIMIT:.0%}): the machine was busy; measure again on an "
                         f"idle machine", ab.speedup, (ab.ci_low, ab.ci_high), band=band,
                         passes=ab.passes)
    drift = drift_of(ab.samples_a, ab.samples_b)
    if idle is not False and drift is not None and drift > DRIFT_LIMIT and not far:
        return Judgement(Verdict.INCONCLUSIVE, f"inconclusive: {ab.speedup:.3f}x [{label} "
                         f"{ab.ci_low:.3f}, {ab.ci_high:.3f}], but the typical run of one side "
                         f"takes {drift:.0%} more than its fastest (more than "
                         f"{DRIFT_LIMIT:.0%}): the machine's load changed during the "
                         f"measurement; measure again on an idle machine", ab.speedup,
                         (ab.ci_low, ab.ci_high), band=band, passes=ab.passes)
    cov = getattr(ab, "coverage", None)
    return judge_evidence(ab.speedup, (ab.ci_low, ab.ci_high), idle=idle,
                          utilisation=utilisation, band=band, passes=ab.passes,
                          coverage=cov if cov is not None and cov < conf else None,
                          confidence=conf, device=device)


def decided(ratios: Sequence[float], band: float = NOISE_BAND,
            confidence: float = CONFIDENCE) -> bool:
    """Whether the verdict on ``ratios`` (the device taken as idle) is conclusive: more
    passes are taken, within their budget, until it is."""
    return judge(ratios, band=band, confidence=confidence).conclusive
