"""An :class:`LLMClient` for any OpenAI-compatible endpoint, on the ``openai`` SDK.

Retries with exponential backoff on transient failures (connection errors, timeouts, 408/409/
429 and 5xx), per-request timeouts, cached-token counts from
``usage.prompt_tokens_details.cached_tokens`` where the server reports them, a prompt cache key
in the request body (OpenAI's ``prompt_cache_key``; servers that do not know the field ignore
it), and the cost of every call from the configured price table.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from .base import Completion, LLMClient, LLMError, LLMTimeoutError, Message
from .config import LLMConfig
from .usage import Price, UsageLedger

_TRANSIENT_STATUS = {408, 409, 425, 429}


def _transient(exc: Exception) -> bool:
    import openai

    if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _TRANSIENT_STATUS or exc.status_code >= 500
    return False


def _cached_tokens(usage: Any) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return int(cached or 0)


class OpenAICompatClient(LLMClient):
    """One client for every model of ``config``; models may name their own endpoint."""

    def __init__(self, config: LLMConfig, *, ledger: UsageLedger | None = None,
                 sleep: Any = time.sleep) -> None:
        self.config = config
        self.ledger = ledger if ledger is not None else UsageLedger()
        self._sleep = sleep
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _client(self, model: str) -> Any:
        import openai

        mc = next((m for m in self.config.models if m.name == model), None)
        base_url = (mc.base_url if mc and mc.base_url else None) or self.config.base_url
        key_env = (mc.api_key_env if mc and mc.api_key_env else None) or self.config.api_key_env
        with self._lock:
            if (base_url, key_env) not in self._clients:
                key = os.environ.get(key_env) or "not-needed"  # local servers need no key
                self._clients[(base_url, key_env)] = openai.OpenAI(
                    base_url=base_url, api_key=key, max_retries=0)
            return self._clients[(base_url, key_env)]

    def _price(self, model: str) -> Price:
        mc = next((m for m in self.config.models if m.name == model), None)
        return mc.price if mc else Price()

    def complete(self, messages: Sequence[Message], *, model: str, max_tokens: int = 4096,
                 temperature: float = 0.7, cache_key: str | None = None,
                 timeout: float = 120.0) -> Completion:
        import openai

        extra_body: dict[str, Any] = dict(self.config.extra)
        if cache_key and self.config.cache_key_field:
            extra_body[self.config.cache_key_field] = cache_key
        attempts = self.config.max_retries + 1
        start = time.monotonic()
        for attempt in range(attempts):
            try:
                resp = self._client(model).chat.completions.create(
                    model=model, messages=list(messages), max_tokens=max_tokens,
                    temperature=temperature, timeout=timeout, extra_body=extra_body or None)
            except Exception as exc:
                if attempt + 1 < attempts and _transient(exc):
                    self._sleep(self.config.backoff_s * 2 ** attempt)
                    continue
                self.ledger.record(model, latency_s=time.monotonic() - start, failed=True)
                if isinstance(exc, openai.APITimeoutError):
                    raise LLMTimeoutError(
                        f"model {model!r} did not answer within {timeout:g} s "
                        f"({attempt + 1} attempt(s))",
                        hint="raise timeout_s for this model or use a faster one") from exc
                raise LLMError(f"request to model {model!r} failed after {attempt + 1} "
                               f"attempt(s): {exc}",
                               hint=f"check the endpoint {self.config.base_url} and the "
                                    f"API key variable {self.config.api_key_env}") from exc
            return self._completion(resp, model, time.monotonic() - start)
        raise AssertionError("unreachable")  # pragma: no cover

    def _completion(self, resp: Any, model: str, latency: float) -> Completion:
        try:
            text = (resp.choices[0].message.content or "") if resp.choices else ""
            if not isinstance(text, str):
                raise TypeError(f"message content is {type(text).__name__}, not text")
            usage = resp.usage
            prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion = int(getattr(usage, "completion_tokens", 0) or 0)
            cached = _cached_tokens(usage)
        except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
            self.ledger.record(model, latency_s=latency, failed=True)
            raise LLMError(f"model {model!r} sent a malformed response: "
                           f"{type(exc).__name__}: {exc}",
                           hint=f"check that {self.config.base_url} speaks the OpenAI chat "
                                "completions API") from exc
        cost = self._price(model).cost(prompt, completion, cached)
        self.ledger.record(model, latency_s=latency, prompt_tokens=prompt,
                           completion_tokens=completion, cached_tokens=cached, cost=cost)
        return Completion(text=text, model=model, latency_s=latency, prompt_tokens=prompt,
                          completion_tokens=completion, cached_tokens=cached, cost=cost)
