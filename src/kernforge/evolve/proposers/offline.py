"""The offline proposer: rule-based rewrites (:mod:`.rules`), so evolution runs with no LLM."""

from __future__ import annotations

import difflib
import random
import time
from collections.abc import Sequence

from ..types import Proposal, ProposalRequest, Proposer
from .rules import RULES, applicable, language_of


class OfflineProposer(Proposer):
    """Applies one rule that changes the parent, drawn with the request's seed. Rules compound
    over generations: a child's own proposals start from the rewritten source."""

    def __init__(self, rules: Sequence[str] | None = None, language: str | None = None) -> None:
        unknown = set(rules or ()) - set(RULES)
        if unknown:
            from ...core import ConfigError

            raise ConfigError(f"unknown offline rule(s) {sorted(unknown)}",
                              hint=f"choose from: {', '.join(RULES)}")
        self.rules = tuple(rules or RULES)
        self.language = language

    def propose(self, request: ProposalRequest) -> Proposal:
        t0 = time.monotonic()
        code = request.parent.code
        try:
            options = {k: v for k, v in applicable(code, self.language).items()
                       if k in self.rules}
        except Exception as exc:  # noqa: BLE001 - a parser failure is a failed proposal
            return Proposal(code=None, model="offline", error=f"offline rules failed: {exc}")
        if not options:
            return Proposal(code=None, model="offline", latency_s=time.monotonic() - t0,
                            error=f"no offline rule changes this {language_of(code)} source "
                                  f"(rules: {', '.join(self.rules)})")
        name = random.Random(request.seed).choice(sorted(options))
        new = options[name]
        diff = "".join(difflib.unified_diff(code.splitlines(True), new.splitlines(True),
                                            "parent", name))
        return Proposal(code=new, diff_text=diff, model=f"offline:{name}",
                        latency_s=time.monotonic() - t0)
