"""Real Proposer / evaluator objects for controller tests (the real ones live elsewhere)."""

from __future__ import annotations

import hashlib
import threading
import time

from kernforge.core import Status
from kernforge.evolve.features import normalize_code
from kernforge.evolve.types import EvalResult, Proposal, ProposalRequest, Proposer, RecordingResult

SEED_CODE = """// a toy kernel
void k(double *out, const double *in, int n) {
  for (int i = 0; i < n; ++i) {
    out[i] = in[i] * 2.0;
  }
}
"""


class OfflineEditProposer(Proposer):
    """Deterministic rewrites driven by the request's seed: adds a statement, renames a
    variable, or (one time in ten) only touches a comment, which is a no-op."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()

    def propose(self, request: ProposalRequest) -> Proposal:
        with self._lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        s, code = request.seed, request.parent.code
        if s % 10 == 0:
            new = code + f"// touched {s}\n"
        elif s % 10 == 1:
            new = code.replace("out[i]", "out[i+0]", 1)
        else:
            line = f"  int t{s % 40} = {s % 5};\n"
            new = code.replace("{\n", "{\n" + line, 1)
        return Proposal(code=new, diff_text="edit", model="offline", latency_s=self.delay_s,
                        prompt_tokens=10, completion_tokens=5, cached_tokens=2, cost=0.0)


def _h(code: str) -> int:
    return int(hashlib.sha256(normalize_code(code).encode()).hexdigest()[:8], 16)


class HashEvaluator:
    """Fitness is a deterministic function of the normalized code; some candidates are wrong,
    some pass one recording of two (so they can never be the best)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, code: str) -> EvalResult:
        with self._lock:
            self.calls.append(code)
        if self.delay_s:
            time.sleep(self.delay_s)
        h = _h(code)
        if h % 11 == 0:
            recs = (RecordingResult("r0", Status.WRONG_RESULT, error=1.0),)
            return EvalResult(Status.WRONG_RESULT, recordings=recs, message="wrong")
        fit = 1e-3 * (1.0 + (h % 1000) / 1000.0)
        second = Status.WRONG_RESULT if h % 7 == 0 else Status.OK
        recs = (RecordingResult("r0", Status.OK, median_s=fit, error=0.0),
                RecordingResult("r1", second, median_s=fit, error=0.0))
        return EvalResult(Status.OK, fitness=fit, error=0.0, config={"block": 128},
                          recordings=recs, extra={"num_regs": h % 128})
