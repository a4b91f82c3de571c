"""A small offline tokenizer for prefix measurements (no downloads, deterministic).

Tokens are words (``\\w+``), single punctuation characters and runs of whitespace: close
enough to a BPE tokenizer's granularity for measuring *shares* of a prompt that two prompts
have in common, and identical on every machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_TOKEN = re.compile(r"\w+|\s+|[^\w\s]")
NAME = "regex \\w+ | whitespace run | one punctuation char"


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def longest_prefix(tokens: Sequence[str], previous: Iterable[Sequence[str]]) -> int:
    """The longest common prefix of ``tokens`` with any of ``previous``."""
    return max((common_prefix(tokens, p) for p in previous), default=0)
