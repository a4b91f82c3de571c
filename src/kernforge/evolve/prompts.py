"""Prefix-cache-aware prompts.

Servers with a prefix cache (vLLM, SGLang, OpenAI) skip the work for the longest prompt prefix
they have seen before, so a prompt is laid out from the most to the least stable content:

1. system message: task, hardware, kernel contract, the original kernel, rules, output format
   (fixed for a run);
2. inspirations, ordered to reuse the longest prefix of recent prompts (R3's algorithm: among
   the recent orderings, take the longest prefix whose programs were all sampled again, put
   it first, append the other sampled programs best first);
3. the parent last, then a fixed closing instruction.

Nothing that changes every iteration (iteration number, time, counters) is rendered before the
parent. Each island gets its own cache key, so a server that routes by key keeps one island's
prompts together.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from ..llm.base import Message
from .types import Program, ProposalRequest

DEFAULT_RULES = (
    "Keep the kernel's name, parameters, parameter order and types unchanged.",
    ("Results must stay correct for every input the contract allows (bitwise unless the "
    "contract declares a tolerance)."),
    "Do not read or write memory outside the buffers and bounds of the contract.",
    "Make one focused change per answer; explain it in one or two sentences first.",
)
DEFAULT_FORMAT = (
    "Answer with one or more SEARCH/REPLACE blocks that edit the current program:\n"
    "<<<<<<< SEARCH\n<exact lines of the current program>\n=======\n<new lines>\n"
    ">>>>>>> REPLACE\n"
    "or, for a larger change, the complete new kernel source in one fenced code block."
)
CLOSING = "Propose one improvement to the current program that makes it faster."


@dataclass(frozen=True)
class PromptStatic:
    """What stays the same for a whole run."""

    task: str = "Make this kernel faster on the target hardware without changing its results."
    hardware: str = ""
    language: str = "cuda"
    reference: str = ""  # the original kernel: the semantics every candidate must keep
    rules: tuple[str, ...] = DEFAULT_RULES
    output_format: str = DEFAULT_FORMAT


@dataclass(frozen=True)
class Prompt:
    messages: tuple[Message, ...]
    cache_key: str
    order: tuple[str, ...]  # inspiration ids, in prompt order

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)


def _best_first(p: Program) -> tuple[int, float, str]:
    return (0 if p.fitness is not None else 1, p.fitness or 0.0, p.id)


def reused_prefix(sampled_ids: set[str], recent: Sequence[Sequence[str]]) -> list[str]:
    """The longest prefix of any recent ordering made only of sampled ids (first wins ties)."""
    best: list[str] = []
    for order in recent:
        prefix: list[str] = []
        for pid in order:
            if pid not in sampled_ids or pid in prefix:
                break
            prefix.append(pid)
        if len(prefix) > len(best):
            best = prefix
    return best


def order_inspirations(sampled: Sequence[Program], *recents: Sequence[Sequence[str]]
                       ) -> list[Program]:
    """R3's ordering: the longest prefix of a recent ordering made only of sampled programs
    comes first (in that order), the remaining sampled programs follow, best first. Several
    histories are tried in turn (an island's own first) until one shares a prefix."""
    by_id = {p.id: p for p in sampled}
    best: list[str] = []
    for recent in recents:
        best = reused_prefix(set(by_id), recent)
        if best:
            break
    rest = sorted((p for p in sampled if p.id not in best), key=_best_first)
    return [by_id[pid] for pid in best] + rest


def _time(p: Program) -> str:
    if p.fitness is None:
        return f"status {p.status.value}"
    return f"{p.fitness * 1e6:.2f} us"


def system_message(static: PromptStatic, contract: str) -> str:
    parts = [f"# Task\n{static.task}"]
    if static.hardware:
        parts.append(f"# Hardware\n{static.hardware}")
    parts.append(f"# Kernel contract\n{contract.strip()}")
    if static.reference:
        parts.append("# Original kernel (the reference: results must match it)\n"
                     f"```{static.language}\n{static.reference.rstrip()}\n```")
    parts.append("# Rules\n" + "\n".join(f"- {r}" for r in static.rules))
    parts.append(f"# Output format\n{static.output_format}")
    return "\n\n".join(parts) + "\n"


def user_message(static: PromptStatic, parent: Program,
                 inspirations: Sequence[Program]) -> str:
    lang = static.language
    parts = []
    if inspirations:
        parts.append("# Other programs of the population")
        for p in inspirations:
            parts.append(f"## Program {p.id} ({_time(p)})\n```{lang}\n{p.code.rstrip()}\n```")
    parts.append(f"# Current program ({_time(parent)})\n```{lang}\n{parent.code.rstrip()}\n```")
    parts.append(CLOSING)
    return "\n\n".join(parts) + "\n"


class PromptBuilder:
    """Builds prompts and remembers recent inspiration orderings per island (thread-safe)."""

    def __init__(self, static: PromptStatic | None = None, *, history: int = 16,
                 key_prefix: str = "kernforge") -> None:
        self.static = static or PromptStatic()
        self.key_prefix = key_prefix
        self._recent: dict[int, deque[tuple[str, ...]]] = {}
        self._all: deque[tuple[str, ...]] = deque(maxlen=history)
        self._history = history
        self._lock = threading.Lock()

    def cache_key(self, island: int) -> str:
        return f"{self.key_prefix}-island-{island}"

    def build(self, request: ProposalRequest) -> Prompt:
        sampled = [p for p in request.inspirations if p.id != request.parent.id]
        with self._lock:
            own = list(self._recent.get(request.island, ()))
            ordered = order_inspirations(sampled, own[::-1], list(self._all)[::-1])
            order = tuple(p.id for p in ordered)
            self._recent.setdefault(request.island,
                                    deque(maxlen=self._history)).append(order)
            self._all.append(order)
        messages = (
            Message(role="system", content=system_message(self.static, request.contract)),
            Message(role="user", content=user_message(self.static, request.parent, ordered)),
        )
        return Prompt(messages=messages, cache_key=self.cache_key(request.island), order=order)
