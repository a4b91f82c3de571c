"""The LLM proposer over the loopback server (real HTTP) and the command proposer."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from kernforge.core import Status
from kernforge.evolve.proposers import PROPOSERS, make_proposer
from kernforge.evolve.proposers.llm import LLMProposer
from kernforge.evolve.types import Program, ProposalRequest
from kernforge.llm import LLMConfig, Load, Scheduler
from kernforge.llm.base import Completion, LLMClient, LLMError, Message
from kernforge.llm.fake_server import Fail, FakeLLMServer
from kernforge.llm.openai_client import OpenAICompatClient

CODE = "__global__ void k(float* a, int n)\n{\n    int i = threadIdx.x;\n    a[i] = 1.0f;\n}\n"
GOOD = "<<<<<<< SEARCH\n    a[i] = 1.0f;\n=======\n    a[i] = 2.0f;\n>>>>>>> REPLACE"
BAD = "<<<<<<< SEARCH\n    b[i] = 1.0f;\n=======\n    b[i] = 2.0f;\n>>>>>>> REPLACE"


def request(island: int = 1) -> ProposalRequest:
    parent = Program(id="p", code=CODE, parent_id=None, island=island, generation=0,
                     fitness=1e-3, status=Status.OK)
    other = Program(id="q", code=CODE.replace("1.0f", "3.0f"), parent_id=None, island=island,
                    generation=0, fitness=2e-3, status=Status.OK)
    return ProposalRequest(island=island, parent=parent, inspirations=(other,), contract="k(a, n)")


def config(url: str) -> LLMConfig:
    return LLMConfig.from_mapping({
        "base_url": url, "backoff_s": 0.01, "max_retries": 1,
        "models": [{"name": "fast", "weight": 0.6, "price": {"prompt": 1, "completion": 1}},
                   {"name": "medium", "weight": 0.3, "price": {"prompt": 2}},
                   {"name": "slow", "weight": 0.1, "price": {"prompt": 5}}]})


def test_registry_names() -> None:
    assert PROPOSERS.names() == ["command", "llm", "offline"]


def test_llm_proposer_end_to_end_with_retry_on_unusable_reply() -> None:
    with FakeLLMServer([BAD, GOOD]) as srv:
        proposer = make_proposer("llm", config=config(srv.base_url))
        p = proposer.propose(request())
    assert p.error is None and p.code is not None and "2.0f" in p.code
    assert p.prompt_tokens > 0 and p.completion_tokens > 0 and p.cost > 0
    assert p.cached_tokens > 0  # the retry repeats the prompt: its prefix is cached
    retry = srv.requests[1]["messages"]
    assert "could not be applied" in retry[-1]["content"] and "search_not_found" in retry[-1][
        "content"]
    assert srv.requests[0]["prompt_cache_key"].endswith("island-1")


def test_llm_proposer_reports_failures() -> None:
    with FakeLLMServer([Fail(500)]) as srv:
        p = LLMProposer(config(srv.base_url), retries=0).propose(request())
    assert p.code is None and "failed" in (p.error or "")
    with FakeLLMServer(["I would not change anything."]) as srv:
        p = LLMProposer(config(srv.base_url), retries=0).propose(request())
    assert p.code is None and (p.error or "").startswith("no_blocks")


def test_llm_proposer_backfills_with_the_fast_model() -> None:
    sched = Scheduler({"fast": 0.6, "medium": 0.3, "slow": 0.1},
                      latency_s={"fast": 1, "medium": 4, "slow": 12})
    sched.begin("slow")  # a slow reply is pending
    with FakeLLMServer([GOOD]) as srv:
        proposer = LLMProposer(config(srv.base_url), scheduler=sched,
                               load=lambda: Load(evaluators=4, queued=0, eval_time_s=2.0))
        for _ in range(5):
            assert proposer.propose(request()).model == "fast"
    assert sched.backfills == 5


def test_command_proposer_with_a_real_script(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        prompt = sys.stdin.read()
        assert "# Current program" in prompt
        print("Doubling the constant.")
        print({GOOD!r})
    """))
    p = make_proposer("command", command=[sys.executable, str(script)],
                      timeout_s=30).propose(request())
    assert p.error is None and "2.0f" in (p.code or "") and p.model.startswith("command:")


def test_command_proposer_timeout_and_exit_code(tmp_path: Path) -> None:
    slow = make_proposer("command", command=[sys.executable, "-c", "import time; time.sleep(5)"],
                         timeout_s=0.5).propose(request())
    assert slow.code is None and "within 0.5 s" in (slow.error or "")
    bad = make_proposer("command", command=[sys.executable, "-c", "import sys; sys.exit(3)"],
                        timeout_s=10).propose(request())
    assert bad.code is None and "exited with 3" in (bad.error or "")


class MalformedServer(FakeLLMServer):
    """Answers 200 with a body that is not a chat completion (a choice without a message)."""

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self._next(body)  # record the request
        return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": "fast",
                     "choices": [{"index": 0, "finish_reason": "stop"}]}


def test_a_malformed_response_is_an_llm_error_and_ends_the_ticket() -> None:
    sched = Scheduler({"fast": 0.6, "medium": 0.3, "slow": 0.1})
    with MalformedServer() as srv:
        client = OpenAICompatClient(config(srv.base_url))
        with pytest.raises(LLMError, match="malformed response"):
            client.complete([Message(role="user", content="hi")], model="fast")
        p = LLMProposer(config(srv.base_url), scheduler=sched, retries=1).propose(request())
    assert p.code is None and "malformed response" in (p.error or "")
    assert sched._pending == {}  # no ticket left pending
    assert client.ledger.per_model["fast"].failures == 1


class ExplodingClient(LLMClient):
    """A client that fails with something other than LLMError."""

    def complete(self, messages: Sequence[Message], *, model: str, max_tokens: int = 4096,
                 temperature: float = 0.7, cache_key: str | None = None,
                 timeout: float = 120.0) -> Completion:
        raise RuntimeError("boom")


def test_any_client_failure_ends_the_scheduler_ticket() -> None:
    sched = Scheduler({"fast": 0.6, "medium": 0.3, "slow": 0.1})
    proposer = LLMProposer(config("http://127.0.0.1:9"), client=ExplodingClient(),
                           scheduler=sched, retries=0)
    with pytest.raises(RuntimeError, match="boom"):
        proposer.propose(request())
    assert sched._pending == {}


@pytest.mark.slow  # waits out a timeout; the quick one is test_command_proposer_timeout_and_exit_code
def test_command_proposer_timeout_kills_the_grandchildren(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(g.pid))\n"
        "time.sleep(60)\n")
    t0 = time.monotonic()
    p = make_proposer("command", command=[sys.executable, "-c", script],
                      timeout_s=2).propose(request())
    assert p.code is None and "within 2 s" in (p.error or "")
    assert time.monotonic() - t0 < 15
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the grandchild outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0] != "Z"
    except OSError:
        return False
