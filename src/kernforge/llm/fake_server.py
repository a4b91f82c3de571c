"""A real OpenAI-compatible HTTP server on loopback that serves scripted completions.

For tests and benchmarks: ``POST /v1/chat/completions`` and ``GET /v1/models`` (stdlib
``http.server`` in a thread). Replies come from a script, a list consumed in order (the last
entry repeats) or a function of the request body; an entry may be a :class:`Fail` (an HTTP
error) or a :class:`Reply` (text with its own delay). Latency is configurable per model.
Usage numbers are counted with the offline tokenizer of :mod:`kernforge.llm.tokens`; the
cached-token count is the longest common token prefix with any previously seen prompt, like a
server with a perfect prefix cache.

Command line: ``python -m kernforge.llm.fake_server --port 8000 --latency fast=1,slow=12``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

from .tokens import longest_prefix, tokenize


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error."""

    status: int = 500
    message: str = "scripted failure"


@dataclass(frozen=True)
class Reply:
    """Answer ``text`` after ``delay_s`` seconds (instead of the model's latency)."""

    text: str
    delay_s: float | None = None


Entry: TypeAlias = "str | Reply | Fail"
Script: TypeAlias = "Sequence[Entry] | Callable[[dict[str, Any]], Entry]"


def render_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The prompt as one string (role headers + contents), the unit of prefix caching."""
    return "".join(f"<|{m.get('role', '')}|>\n{m.get('content', '')}\n" for m in messages)


class FakeLLMServer:
    """``with FakeLLMServer(["reply"]) as srv: OpenAI(base_url=srv.base_url)``."""

    def __init__(self, script: Script = ("ok",), *, latency: Mapping[str, float] | float = 0.0,
                 host: str = "127.0.0.1", port: int = 0, cache_window: int = 256) -> None:
        self.script = script
        self.latency = latency
        self.cache_window = cache_window
        self.requests: list[dict[str, Any]] = []
        self._seen: list[list[str]] = []
        self._index = 0
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> FakeLLMServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeLLMServer:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def models(self) -> list[str]:
        return sorted(self.latency) if isinstance(self.latency, Mapping) else ["fake"]

    def _next(self, body: dict[str, Any]) -> Entry:
        with self._lock:
            self.requests.append(body)
            if callable(self.script):
                return self.script(body)
            entries = list(self.script)
            entry = entries[min(self._index, len(entries) - 1)]
            self._index += 1
            return entry

    def _delay(self, model: str) -> float:
        if isinstance(self.latency, Mapping):
            return float(self.latency.get(model, 0.0))
        return float(self.latency)

    def _usage(self, prompt: str, text: str) -> dict[str, Any]:
        tokens = tokenize(prompt)
        with self._lock:
            cached = longest_prefix(tokens, self._seen)
            self._seen.append(tokens)
            del self._seen[:-self.cache_window]
        completion = len(tokenize(text))
        return {"prompt_tokens": len(tokens), "completion_tokens": completion,
                "total_tokens": len(tokens) + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The status and JSON body for one chat completion request."""
        model = str(body.get("model", "fake"))
        entry = self._next(body)
        if isinstance(entry, Fail):
            time.sleep(self._delay(model))
            return entry.status, {"error": {"message": entry.message, "type": "server_error"}}
        reply = entry if isinstance(entry, Reply) else Reply(str(entry))
        time.sleep(self._delay(model) if reply.delay_s is None else reply.delay_s)
        usage = self._usage(render_prompt(body.get("messages", [])), reply.text)
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
            "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply.text}}],
            "usage": usage,
        }


def _handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "owned_by": "kernforge"}
                    for m in server.models()]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as exc:
                self._send(400, {"error": {"message": f"bad JSON: {exc}"}})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            self._send(*server.answer(body))

    return Handler


def _parse_latency(text: str) -> dict[str, float] | float:
    if "=" not in text:
        return float(text or 0)
    pairs = (p.split("=", 1) for p in text.split(",") if p)
    return {k.strip(): float(v) for k, v in pairs}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m kernforge.llm.fake_server",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--latency", default="0",
                    help="seconds, or per model: fast=1,medium=4,slow=12")
    ap.add_argument("--reply", default="no change", help="the text every request gets")
    ap.add_argument("--reply-file", help="read the reply text from this file")
    args = ap.parse_args(argv)
    text = args.reply
    if args.reply_file:
        with open(args.reply_file, encoding="utf8") as fh:
            text = fh.read()
    srv = FakeLLMServer([text], latency=_parse_latency(args.latency), host=args.host,
                        port=args.port)
    print(f"serving scripted completions on {srv.base_url} (Ctrl-C to stop)", flush=True)
    try:
        srv._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv._httpd.server_close()


if __name__ == "__main__":
    main()
