"""kernforge.llm: the LLM client interface, an OpenAI-compatible client, usage accounting, the
runtime-aware scheduler and a loopback fake server (see docs/llm.md).

The ``openai`` SDK is imported only when a request is sent.
"""

from .base import Completion, LLMClient, LLMError, LLMTimeoutError, Message
from .config import DEFAULT_WEIGHTS, LLMConfig, ModelConfig
from .openai_client import OpenAICompatClient
from .scheduler import Decision, Load, Scheduler
from .usage import ModelUsage, Price, UsageLedger

__all__ = [
    "DEFAULT_WEIGHTS", "Completion", "Decision", "LLMClient", "LLMConfig", "LLMError",
    "LLMTimeoutError", "Load", "Message", "ModelConfig", "ModelUsage", "OpenAICompatClient",
    "Price", "Scheduler", "UsageLedger",
]
