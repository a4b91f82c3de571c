"""Every registered sampler passes the conformance suite."""

from pathlib import Path

import pytest

from kernforge.testing.samplers import SamplerConformance
from kernforge.tune import SAMPLERS

# resuming after a kill runs a child process and two studies on disk (seconds each); the
# Optuna-study samplers share one resume path (tests/tune/test_loop.py kills and resumes the
# default one), so the default run resumes the samplers with their own resume code
OWN_RESUME = ("exhaustive", "rounds")


class TestSamplerConformance(SamplerConformance):
    @pytest.mark.parametrize("sampler", [
        n if n in OWN_RESUME else pytest.param(n, marks=pytest.mark.slow)
        for n in SAMPLERS.names()])
    def test_resume_after_sigkill_repeats_no_finished_trial(self, sampler: str,
                                                            tmp_path: Path) -> None:
        super().test_resume_after_sigkill_repeats_no_finished_trial(sampler, tmp_path)
