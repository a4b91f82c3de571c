"""LLM configuration as frozen data, read strictly: an unknown key is a :class:`ConfigError`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core import ConfigError
from ..core.strict import field_names, strict_keys
from .usage import Price

DEFAULT_WEIGHTS = (0.6, 0.3, 0.1)


def _strict(cls: type, data: Mapping[str, Any], where: str) -> dict[str, Any]:
    return strict_keys(data, field_names(cls), where)


@dataclass(frozen=True)
class ModelConfig:
    """One model of the ensemble. ``base_url``/``api_key_env`` default to the endpoint's."""

    name: str
    weight: float = 1.0
    base_url: str | None = None
    api_key_env: str | None = None
    price: Price = field(default_factory=Price)
    max_tokens: int = 4096
    temperature: float = 0.7
    timeout_s: float = 300.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> ModelConfig:
        d = _strict(cls, data, f"model {data.get('name', '?')!r}")
        if "name" not in d:
            raise ConfigError("a model entry has no 'name'", hint="add name: <model id>")
        if "price" in d:
            d["price"] = Price.from_mapping(d["price"])
        if float(d.get("weight", 1.0)) < 0:
            raise ConfigError(f"model {d['name']!r} has a negative weight",
                              hint="weights are >= 0 (they are normalized)")
        return cls(**d)


@dataclass(frozen=True)
class LLMConfig:
    """An endpoint (any OpenAI-compatible server) and the models of the ensemble.

    ``cache_key_field`` is the request field that carries the per-island prompt cache key
    (OpenAI: ``prompt_cache_key``); ``None`` sends none."""

    models: tuple[ModelConfig, ...] = ()
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    max_retries: int = 3
    backoff_s: float = 1.0
    cache_key_field: str | None = "prompt_cache_key"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> LLMConfig:
        d = _strict(cls, data, "llm")
        d["models"] = tuple(ModelConfig.from_mapping(m) for m in d.get("models", ()))
        if not d["models"]:
            raise ConfigError("llm.models is empty",
                              hint="list at least one model: models: [{name: ..., weight: ...}]")
        return cls(**d)

    def weights(self) -> dict[str, float]:
        total = sum(m.weight for m in self.models) or 1.0
        return {m.name: m.weight / total for m in self.models}

    def model(self, name: str) -> ModelConfig:
        for m in self.models:
            if m.name == name:
                return m
        raise ConfigError(f"no model named {name!r} in llm.models",
                          hint=f"configured: {', '.join(m.name for m in self.models)}")
