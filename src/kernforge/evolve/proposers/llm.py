"""The LLM proposer: a weighted ensemble of models behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...llm.base import Completion, LLMClient, LLMError, Message
from ...llm.config import LLMConfig
from ...llm.scheduler import Load, Scheduler
from ..patch import apply_reply
from ..prompts import PromptBuilder, PromptStatic
from ..types import Proposal, ProposalRequest, Proposer


@dataclass
class _Totals:
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0

    def add(self, c: Completion) -> None:
        self.latency_s += c.latency_s
        self.prompt_tokens += c.prompt_tokens
        self.completion_tokens += c.completion_tokens
        self.cached_tokens += c.cached_tokens
        self.cost += c.cost


class LLMProposer(Proposer):
    """Builds a prefix-cache-aware prompt, asks the model the scheduler picks, applies the reply
    to the parent; a reply that cannot be applied is retried (``retries`` times) with the
    reason appended to the conversation, a failed request with the next model drawn.

    ``load`` (a callable returning a :class:`Load`, e.g. the controller's
    :class:`~kernforge.evolve.load.LoadTracker`) tells the scheduler how busy the evaluators
    are. ``runtime_aware`` (default: on when ``load`` is given here) turns backfill on; the
    controller attaches its tracker to every proposer, which is used only in that mode. When
    off, each model is drawn by weight from the request's seed, so the choice per iteration is
    reproducible (also on resume). ``client`` defaults to
    :class:`~kernforge.llm.OpenAICompatClient` on ``config``."""

    def __init__(self, config: LLMConfig, *, client: LLMClient | None = None,
                 static: PromptStatic | None = None, builder: PromptBuilder | None = None,
                 scheduler: Scheduler | None = None, load: Callable[[], Load] | None = None,
                 retries: int = 1, seed: int = 0, runtime_aware: bool | None = None) -> None:
        if client is None:
            from ...llm.openai_client import OpenAICompatClient

            client = OpenAICompatClient(config)
        self.config = config
        self.client = client
        self.builder = builder or PromptBuilder(static)
        latency = {m.name: m.timeout_s / 10 for m in config.models}
        self.scheduler = scheduler or Scheduler(config.weights(), latency_s=latency, seed=seed)
        self.load: Any = load
        self.runtime_aware = load is not None if runtime_aware is None else runtime_aware
        self.retries = retries

    def attach_load(self, load: Any) -> None:
        if self.load is None:
            self.load = load

    def _ask(self, messages: list[Message], cache_key: str,
             u: float | None = None) -> tuple[Completion, bool]:
        load = self.load() if self.runtime_aware and self.load is not None else None
        decision = self.scheduler.choose(load, u=u)
        mc = self.config.model(decision.model)
        track = self.load if hasattr(self.load, "llm_started") else None
        if track is not None:
            track.llm_started(mc.name)
        reply: Completion | None = None
        try:  # whatever the client raises, the ticket is never left pending
            reply = self.client.complete(messages, model=mc.name, max_tokens=mc.max_tokens,
                                         temperature=mc.temperature, cache_key=cache_key,
                                         timeout=mc.timeout_s)
        finally:
            self.scheduler.end(decision.ticket, reply.latency_s if reply else None)
            if track is not None:
                track.llm_finished(mc.name)
        return reply, decision.backfill

    def propose(self, request: ProposalRequest) -> Proposal:
        prompt = self.builder.build(request)
        messages = list(prompt.messages)
        totals = _Totals()
        error, text, model, backfill = "no attempt made", "", "", False
        rng = random.Random(request.seed)  # the weighted draws depend on the iteration only
        for _ in range(self.retries + 1):
            try:
                reply, backfill = self._ask(messages, prompt.cache_key, rng.random())
            except LLMError as exc:
                error = exc.message
                continue
            totals.add(reply)
            text, model = reply.text, reply.model
            result = apply_reply(request.parent.code, reply.text)
            if result.ok:
                return self._proposal(result.code, text, model, totals, None, backfill)
            error = f"{result.kind.value if result.kind else ''}: {result.message}"
            messages = list(prompt.messages) + [
                Message(role="assistant", content=reply.text),
                Message(role="user", content=f"Your answer could not be applied ({error}). "
                                             "Answer again in the required output format.")]
        return self._proposal(None, text, model, totals, error, backfill)

    @staticmethod
    def _proposal(code: str | None, text: str, model: str, t: _Totals,
                  error: str | None, backfill: bool = False) -> Proposal:
        return Proposal(code=code, diff_text=text, model=model, latency_s=t.latency_s,
                        prompt_tokens=t.prompt_tokens, completion_tokens=t.completion_tokens,
                        cached_tokens=t.cached_tokens, cost=t.cost, error=error,
                        backfill=backfill)
