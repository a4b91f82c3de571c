"""The command proposer: any agent CLI that reads a prompt on stdin and answers on stdout."""

from __future__ import annotations

import os
import shlex
import signal
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
        try:  # its own session: on a timeout the whole process group goes, grandchildren too
            proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=self.env,
                                    start_new_session=True)
        except OSError as exc:
            return Proposal(code=None, model=self.name,
                            error=f"could not run {self.argv[0]}: {exc}")
        try:
            stdout, stderr = proc.communicate(prompt.text, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return Proposal(code=None, model=self.name, latency_s=time.monotonic() - t0,
                            error=f"{self.argv[0]} did not answer within {self.timeout_s:g} s")
        except BaseException:
            _kill_group(proc)
            raise
        latency = time.monotonic() - t0
        if proc.returncode != 0:
            tail = stderr.strip()[-500:]
            return Proposal(code=None, diff_text=stdout, model=self.name, latency_s=latency,
                            error=f"{self.argv[0]} exited with {proc.returncode}: {tail}")
        result = apply_reply(request.parent.code, stdout)
        return Proposal(code=result.code, diff_text=stdout, model=self.name,
                        latency_s=latency,
                        error=None if result.ok else f"{result.kind.value if result.kind else ''}: "
                              f"{result.message}")


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the process group ``proc`` leads (started with ``start_new_session``), then
    reap ``proc`` and close its pipes."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:  # a pipe still held open: stop waiting for it
        for pipe in (proc.stdout, proc.stderr, proc.stdin):
            if pipe is not None:
                pipe.close()
        proc.wait()
