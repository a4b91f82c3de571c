"""``kernforge serve``: a service in a background process, found through a state file.

``start_background`` spawns ``python -m kernforge.service.daemon`` in its own session; that
process starts the cluster (scheduler + workers), loads the preload recordings, writes the state
file (atomically: address, pid, configuration, log) and waits. It stops on SIGTERM/SIGINT, or
when its scheduler is shut down by a client, and removes the state file on its way out.

Default state file: ``$KERNFORGE_CACHE_DIR/serve.json``, else ``~/.cache/kernforge/serve.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.paths import cache_path
from .config import ServiceConfig

STATE_FORMAT = "kernforge-serve-state"


def default_state() -> Path:
    return cache_path("serve.json")


def read_state(path: Path | None = None) -> dict[str, Any]:
    path = Path(path or default_state())
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"no service state at {path}: no service is running there",
                          hint="start one with `kernforge serve start`") from None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"unreadable service state {path}: {exc}",
                          hint="remove it if no service runs, then start again") from exc
    if data.get("format") != STATE_FORMAT or "address" not in data:
        raise ConfigError(f"{path} is not a kernforge serve state file")
    return dict(data)


def write_state(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".serve-", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump({"format": STATE_FORMAT, **data}, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    try:  # our own child that exited is a zombie until reaped
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def serve(state: Path, cfg: ServiceConfig, preload: list[str]) -> int:
    """The background process: run the service until told to stop."""
    from .client import Client

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    client = Client(config=cfg)
    try:
        if preload:
            client.load(preload)
        write_state(state, {"address": client.address, "pid": os.getpid(),
                            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            "config": cfg.to_json(), "preload": preload,
                            "log": str(state.with_suffix(".log"))})
        scheduler = getattr(client.cluster, "scheduler", None)
        while not stop.wait(0.5):
            if scheduler is not None and scheduler.status.name in ("closing", "closed"):
                break
    finally:
        try:
            if read_state(state).get("pid") == os.getpid():
                state.unlink()
        except ConfigError:
            pass
        client.close()
    return 0


def start_background(state: Path, cfg: ServiceConfig, preload: list[str],
                     wait_s: float = 120.0) -> dict[str, Any]:
    """Spawn the service process and wait until its state file names it."""
    state = Path(state).resolve()
    try:
        old = read_state(state)
    except ConfigError:
        old = None
    if old is not None and pid_alive(int(old.get("pid", 0))):
        raise ConfigError(f"a service already runs at {old['address']} (pid {old['pid']})",
                          hint=f"stop it first: kernforge serve stop --state {state}")
    state.parent.mkdir(parents=True, exist_ok=True)
    log = state.with_suffix(".log")
    cmd = [sys.executable, "-m", "kernforge.service.daemon", "--state", str(state),
           "--config", json.dumps(cfg.to_json()), *[a for p in preload for a in ("--preload", p)]]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise ConfigError(f"the service process exited with status {proc.returncode}:\n"
                              f"{tail}", hint=f"see {log}")
        try:
            data = read_state(state)
            if data.get("pid") == proc.pid:
                return data
        except ConfigError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise ConfigError(f"the service did not come up within {wait_s:g} s", hint=f"see {log}")


def stop_service(state: Path | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Stop the service named by ``state``: SIGTERM to its process (which closes the cluster),
    or, if that process is gone, a shutdown through the scheduler."""
    path = Path(state or default_state())
    data = read_state(path)
    pid = int(data.get("pid", 0))
    if pid and pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid_alive(pid):  # the service runs in its own session: kill its workers too
            try:
                leader = os.getpgid(pid) == pid
                os.killpg(pid, signal.SIGKILL) if leader else os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    else:
        from .client import Client
        with contextlib.suppress(Exception):  # the scheduler is gone too: only the file is left
            Client(data["address"], connect_timeout=5).shutdown()
    path.unlink(missing_ok=True)  # the service may remove it itself meanwhile
    return data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernforge.service.daemon")
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--config", default="{}", help="ServiceConfig as JSON")
    p.add_argument("--preload", action="append", default=[])
    args = p.parse_args(argv)
    cfg = ServiceConfig.from_mapping(json.loads(args.config))
    return serve(args.state, cfg, args.preload)


if __name__ == "__main__":
    sys.exit(main())
