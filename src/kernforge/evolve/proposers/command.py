"""The command proposer: any agent CLI that reads a prompt on stdin and answers on stdout."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence

from ..patch import apply_reply
from ..prompts import PromptBuilder, PromptStatic
from ..types import Proposal, ProposalRequest, Proposer


class CommandProposer(Proposer):
    """Runs ``command`` once per request with the prompt (system then user part) on stdin; the
    reply (SEARCH/REPLACE blocks or a fenced rewrite) is read from stdout."""

    def __init__(self, command: str | Sequence[str], *, timeout_s: float = 600.0,
                 static: PromptStatic | None = None, builder: PromptBuilder | None = None,
                 env: Mapping[str, str] | None = None, name: str | None = None) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        self.timeout_s = timeout_s
        self.builder = builder or PromptBuilder(static)
        self.env = dict(env) if env is not None else None
        self.name = name or f"command:{self.argv[0]}"

    def propose(self, request: ProposalRequest) -> Proposal:
        prompt = self.builder.build(request)
        t0 = time.monotonic()
        try:
            proc = subprocess.run(self.argv, input=prompt.text, capture_output=True, text=True,
                                  timeout=self.timeout_s, env=self.env, check=False)
        except subprocess.TimeoutExpired:
            return Proposal(code=None, model=self.name, latency_s=time.monotonic() - t0,
                            error=f"{self.argv[0]} did not answer within {self.timeout_s:g} s")
        except OSError as exc:
            return Proposal(code=None, model=self.name,
                            error=f"could not run {self.argv[0]}: {exc}")
        latency = time.monotonic() - t0
        if proc.returncode != 0:
            tail = proc.stderr.strip()[-500:]
            return Proposal(code=None, diff_text=proc.stdout, model=self.name, latency_s=latency,
                            error=f"{self.argv[0]} exited with {proc.returncode}: {tail}")
        result = apply_reply(request.parent.code, proc.stdout)
        return Proposal(code=result.code, diff_text=proc.stdout, model=self.name,
                        latency_s=latency,
                        error=None if result.ok else f"{result.kind.value if result.kind else ''}: "
                              f"{result.message}")
