"""The speed verdicts (faster, not faster, inconclusive): they live in
:mod:`kernforge.core.verdict` so that every layer (deploy included) shares the one vocabulary."""

from ..core.verdict import (
    CONFIDENCE,
    MAX_WIDTH,
    NOISE_BAND,
    NOISE_LIMIT,
    Judgement,
    Verdict,
    decided,
    judge,
    judge_ab,
    judge_evidence,
    min_passes,
    per_look,
    spread_of,
)

__all__ = ["CONFIDENCE", "MAX_WIDTH", "NOISE_BAND", "NOISE_LIMIT", "Judgement", "Verdict",
           "decided", "judge", "judge_ab", "judge_evidence", "min_passes", "per_look",
           "spread_of"]
