"""The speed verdicts (faster, not faster, inconclusive): they live in
:mod:`kernforge.core.verdict` so that every layer (deploy included) shares the one vocabulary."""

from ..core.verdict import (
    CONFIDENCE,
    DRIFT_LIMIT,
    MAX_WIDTH,
    NOISE_BAND,
    NOISE_LIMIT,
    Judgement,
    Looks,
    Verdict,
    ci_label,
    decided,
    drift_of,
    judge,
    judge_ab,
    judge_evidence,
    looks,
    min_passes,
    per_look,
    spread_of,
)

__all__ = ["CONFIDENCE", "DRIFT_LIMIT", "MAX_WIDTH", "NOISE_BAND", "NOISE_LIMIT", "Judgement", "Looks",
           "Verdict", "ci_label", "decided", "drift_of", "judge", "judge_ab", "judge_evidence",
           "looks", "min_passes", "per_look", "spread_of"]
