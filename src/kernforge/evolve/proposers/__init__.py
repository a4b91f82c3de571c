"""Proposers: turn a :class:`~kernforge.evolve.types.ProposalRequest` into new kernel source.

One registry line per proposer (``PROPOSERS``, family "proposer"):

- ``llm``: an ensemble of models behind an OpenAI-compatible endpoint (prompts from
  :mod:`kernforge.evolve.prompts`, replies applied with :mod:`kernforge.evolve.patch`);
- ``command``: any agent CLI, prompt on stdin, reply on stdout;
- ``offline``: rule-based rewrites of C/CUDA source, no LLM at all.
"""

from __future__ import annotations

from typing import Any

from ...core import Registry
from ..types import Proposer

PROPOSERS: Registry[type[Proposer]] = Registry("proposer")
PROPOSERS.register("llm", "kernforge.evolve.proposers.llm:LLMProposer")
PROPOSERS.register("command", "kernforge.evolve.proposers.command:CommandProposer")
PROPOSERS.register("offline", "kernforge.evolve.proposers.offline:OfflineProposer")


def make_proposer(name: str, **kwargs: Any) -> Proposer:
    """The proposer registered as ``name``, constructed with ``kwargs``."""
    return PROPOSERS.get(name)(**kwargs)


__all__ = ["PROPOSERS", "make_proposer"]
