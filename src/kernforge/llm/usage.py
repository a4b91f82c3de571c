"""Usage and cost accounting: per-model prices and a thread-safe ledger of calls."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.strict import field_names, strict_keys


@dataclass(frozen=True)
class Price:
    """US dollars per million tokens. Cached prompt tokens cost ``cached`` instead of ``prompt``
    (``None``: the same as ``prompt``)."""

    prompt: float = 0.0
    completion: float = 0.0
    cached: float | None = None

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached = min(cached_tokens, prompt_tokens)
        cached_rate = self.prompt if self.cached is None else self.cached
        return ((prompt_tokens - cached) * self.prompt + cached * cached_rate
                + completion_tokens * self.completion) / 1e6

    @classmethod
    def from_mapping(cls, data: Mapping[str, float]) -> Price:
        d = strict_keys(data, field_names(cls), "a price",
                        hint="a price has: prompt, completion, cached (USD per 1M tokens)")
        return cls(**{k: float(v) for k, v in d.items()})


@dataclass
class ModelUsage:
    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0
    latency_s: float = 0.0

    @property
    def cached_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class UsageLedger:
    """Totals per model; ``record`` is safe to call from several threads."""

    per_model: dict[str, ModelUsage] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, model: str, *, latency_s: float, prompt_tokens: int = 0,
               completion_tokens: int = 0, cached_tokens: int = 0, cost: float = 0.0,
               failed: bool = False) -> None:
        with self._lock:
            u = self.per_model.setdefault(model, ModelUsage())
            u.calls += 1
            u.failures += int(failed)
            u.prompt_tokens += prompt_tokens
            u.completion_tokens += completion_tokens
            u.cached_tokens += cached_tokens
            u.cost += cost
            u.latency_s += latency_s

    def total(self) -> ModelUsage:
        with self._lock:
            t = ModelUsage()
            for u in self.per_model.values():
                t.calls += u.calls
                t.failures += u.failures
                t.prompt_tokens += u.prompt_tokens
                t.completion_tokens += u.completion_tokens
                t.cached_tokens += u.cached_tokens
                t.cost += u.cost
                t.latency_s += u.latency_s
            return t
