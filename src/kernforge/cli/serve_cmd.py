"""``kernforge serve start|status|stop``: the persistent replay service in the background."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core.fmt import fmt_time
from ..record import find_recordings
from ..service import Client, ServiceConfig
from ..service.daemon import default_state, read_state, start_background, stop_service
from .output import console


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the replay service (persistent Dask workers)",
                       description="A scheduler and one replay worker per GPU (or CPU core "
                                   "group) in the background; clients connect with "
                                   "kernforge.service.Client.from_state(). See docs/service.md.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start the service in the background")
    start.add_argument("--backend", default=None, help="cpu (default) or cuda")
    start.add_argument("--workers", type=int, default=None,
                       help="workers (cuda: default one per visible GPU; cpu: min(2, cores))")
    start.add_argument("--cores-per-worker", type=int, default=None, help="cpu only")
    start.add_argument("--port", type=int, default=None, help="scheduler port (default: any)")
    start.add_argument("--config", type=Path, default=None,
                       help="service configuration (YAML, TOML or JSON), e.g. a SLURM cluster")
    start.add_argument("--preload", action="append", default=[], metavar="PATH",
                       help="recordings every worker loads at start (repeatable)")
    for action in (start, actions.add_parser("status", help="workers and metrics"),
                   actions.add_parser("stop", help="stop the service")):
        action.add_argument("--state", type=Path, default=None,
                            help=f"state file (default {default_state()})")
        if action is not start:
            action.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def _config(args: argparse.Namespace) -> ServiceConfig:
    data: dict[str, Any] = ServiceConfig.from_file(args.config).to_json() if args.config else {}
    for key, value in (("backend", args.backend), ("workers", args.workers),
                       ("cores_per_worker", args.cores_per_worker), ("port", args.port)):
        if value is not None:
            data[key] = value
    return ServiceConfig.from_mapping(data)


def run(args: argparse.Namespace) -> int:
    state = args.state or default_state()
    if args.action == "start":
        preload = [str(Path(u).resolve()) for p in args.preload for u in find_recordings(p)]
        data = start_background(state, _config(args), preload)
        console.print(f"kernforge service at {data['address']} (pid {data['pid']}); "
                      f"state {state}; log {data['log']}", markup=False)
        return 0
    if args.action == "stop":
        data = stop_service(state)
        if args.json:
            console.print_json(json.dumps({"stopped": data["address"]}))
        else:
            console.print(f"stopped the service at {data['address']}", markup=False)
        return 0
    return _status(state, as_json=args.json)


def _status(state: Path, *, as_json: bool) -> int:
    data = read_state(state)
    with Client(data["address"], connect_timeout=10) as client:
        workers, metrics = client.workers(), client.metrics()
    if as_json:
        console.print_json(json.dumps({"address": data["address"], "pid": data.get("pid"),
                                       "workers": workers, "metrics": metrics.to_json()},
                                      default=str))
        return 0
    t = Table(title=f"kernforge service {data['address']} (pid {data.get('pid')})")
    for col in ("worker", "pid", "pinned to", "recordings", "evaluations", "up"):
        t.add_column(col)
    for w in workers:
        pinned = (f"GPU {w['cuda_visible_devices']}" if w.get("cuda_visible_devices")
                  else f"cores {w.get('cores')}")
        t.add_row(escape(str(w.get("name"))), str(w.get("pid", "-")), escape(pinned),
                  str(len(w.get("recordings", []))), str(w.get("evaluations", "-")),
                  fmt_time(w.get("uptime_s")))
    console.print(t)
    m = metrics
    console.print(f"evaluations {m.evaluations} ({m.evaluations_per_s:.2f}/s over the last "
                  f"minute), queued {m.queued}, running {m.running}, worker restarts "
                  f"{m.worker_restarts}, requests that killed their worker {m.deaths}"
                  + (f", evaluations sent again after a nanny closed their worker {m.closed}"
                     if m.closed else ""), markup=False)
    console.print("by status: " + (", ".join(f"{k} {v}" for k, v in sorted(m.by_status.items()))
                                   or "-"), markup=False)
    console.print("mean stage time: " + (", ".join(
        f"{k} {fmt_time(v)}" for k, v in m.stage_mean_s.items()) or "-"), markup=False)
    return 0
