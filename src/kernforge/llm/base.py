"""The LLM client interface: one small ABC, a completion record and typed errors."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from ..core import KernforgeError


class Message(TypedDict):
    """One chat message, as OpenAI-compatible servers take it."""

    role: str
    content: str


@dataclass(frozen=True)
class Completion:
    """One answered request. Token counts are what the server reported (0 when it did not);
    ``cached_tokens`` is the part of the prompt the server served from its prefix cache."""

    text: str
    model: str
    latency_s: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cost: float = 0.0


class LLMError(KernforgeError):
    """A request to a language model failed after its retries."""


class LLMTimeoutError(LLMError):
    """A request to a language model did not answer within its timeout."""


class LLMClient(ABC):
    """Sends chat messages to a model and returns a :class:`Completion`; raises
    :class:`LLMError` (or :class:`LLMTimeoutError`) when no answer came back."""

    @abstractmethod
    def complete(self, messages: Sequence[Message], *, model: str, max_tokens: int = 4096,
                 temperature: float = 0.7, cache_key: str | None = None,
                 timeout: float = 120.0) -> Completion:
        """Return the model's reply to ``messages``."""
