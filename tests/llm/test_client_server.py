"""The OpenAI-compatible client against the loopback server, over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from kernforge.core import ConfigError
from kernforge.llm import LLMConfig, LLMError, LLMTimeoutError, OpenAICompatClient
from kernforge.llm.fake_server import Fail, FakeLLMServer, Reply


def _client(srv: FakeLLMServer, **kw: object) -> OpenAICompatClient:
    cfg = {"base_url": srv.base_url, "backoff_s": 0.01,
           "models": [{"name": "fast", "weight": 0.6, "price": {"prompt": 1.0, "completion": 2.0,
                                                               "cached": 0.1}},
                      {"name": "slow", "weight": 0.4}]}
    cfg.update(kw)
    return OpenAICompatClient(LLMConfig.from_mapping(cfg))


def test_completion_usage_cost_and_cache_key() -> None:
    with FakeLLMServer(["first reply", "second"], latency={"fast": 0.0}) as srv:
        client = _client(srv)
        msgs = [{"role": "system", "content": "static rules " * 20},
                {"role": "user", "content": "parent one"}]
        a = client.complete(msgs, model="fast", cache_key="island-0")
        msgs[1] = {"role": "user", "content": "parent two"}
        b = client.complete(msgs, model="fast", cache_key="island-0")
    assert (a.text, b.text) == ("first reply", "second")
    assert a.cached_tokens == 0 and a.prompt_tokens > 40
    assert b.cached_tokens >= 40 and b.cached_tokens < b.prompt_tokens
    assert srv.requests[0]["prompt_cache_key"] == "island-0"
    expected = ((b.prompt_tokens - b.cached_tokens) * 1.0 + b.cached_tokens * 0.1
                + b.completion_tokens * 2.0) / 1e6
    assert b.cost == pytest.approx(expected)
    total = client.ledger.total()
    assert total.calls == 2 and total.cached_tokens == b.cached_tokens


def test_retries_on_scripted_500() -> None:
    with FakeLLMServer([Fail(500), Fail(503), "ok"]) as srv:
        reply = _client(srv).complete([{"role": "user", "content": "x"}], model="fast")
    assert reply.text == "ok" and len(srv.requests) == 3


def test_gives_up_after_retries_and_on_client_errors() -> None:
    with FakeLLMServer([Fail(500)]) as srv, pytest.raises(LLMError, match="after 2 attempt"):
        _client(srv, max_retries=1).complete([{"role": "user", "content": "x"}],
                                             model="fast")
    with FakeLLMServer([Fail(400, "bad request")]) as srv:
        with pytest.raises(LLMError, match="after 1 attempt"):
            _client(srv).complete([{"role": "user", "content": "x"}], model="fast")
        assert len(srv.requests) == 1


def test_timeout() -> None:
    # the reply would take 10 s: giving up at 0.3 s is told apart from waiting for it with a
    # wide margin, however loaded the machine
    with FakeLLMServer([Reply("late", delay_s=10.0)]) as srv:
        t0 = time.monotonic()
        with pytest.raises(LLMTimeoutError, match="within 0.3 s"):
            _client(srv, max_retries=0).complete([{"role": "user", "content": "x"}],
                                                 model="slow", timeout=0.3)
        assert time.monotonic() - t0 < 6.0


def test_latency_per_model_and_models_route() -> None:
    with FakeLLMServer(lambda body: body["model"], latency={"fast": 0.0, "slow": 0.3}) as srv:
        client = _client(srv)
        f = client.complete([{"role": "user", "content": "x"}], model="fast")
        s = client.complete([{"role": "user", "content": "x"}], model="slow")
        with urllib.request.urlopen(srv.base_url + "/models") as resp:
            models = [m["id"] for m in json.load(resp)["data"]]
    assert f.text == "fast" and s.text == "slow"
    assert s.latency_s >= 0.3 > f.latency_s
    assert models == ["fast", "slow"]


def test_config_is_strict() -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        LLMConfig.from_mapping({"models": [{"name": "a", "wieght": 1}]})
    with pytest.raises(ConfigError, match="unknown key 'prmpt' in a price"):
        LLMConfig.from_mapping({"models": [{"name": "a", "price": {"prmpt": 1.0}}]})
    with pytest.raises(ConfigError, match="empty"):
        LLMConfig.from_mapping({"models": []})
    cfg = LLMConfig.from_mapping({"models": [{"name": "a", "weight": 3}, {"name": "b"}]})
    assert cfg.weights() == {"a": 0.75, "b": 0.25}


def test_command_line_server() -> None:
    proc = subprocess.Popen([sys.executable, "-m", "kernforge.llm.fake_server", "--port", "0",
                             "--reply", "hi"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        base_url = line.split()[4]
        cfg = LLMConfig.from_mapping({"base_url": base_url, "models": [{"name": "m"}]})
        assert OpenAICompatClient(cfg).complete([{"role": "user", "content": "x"}],
                                                model="m").text == "hi"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
