"""The red-team table: every cheating candidate, the Status and reason it is rejected with.

Records the catalog's small applications on the backend, validates each cheat with every gate
(kernforge.replay.validate), and prints a Markdown table (case, Status, reason, verdict,
caught). ``--dynamic`` adds a column with the static checks switched off (what the dynamic
gates alone do); cheats that are unsafe to run in-process (a detached thread) run in a child
process there. ``--out FILE.md`` writes the table with its date, device and command;
``--json FILE`` writes the rows as a figure file with provenance. Exits 1 if a cheat was not
rejected with the right reason.

    kernforge integrity redteam [--backend cpu|cuda] [--dynamic] [--out docs/benchmarks/redteam-cpu.md]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
import time
from importlib import import_module
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..core import Status
from ..harness.provenance import provenance, write_figure
from ..testing.redteam import (
    Outcome,
    reaches_sanitizer,
    record_bases,
    run_cheat,
    run_suite,
    table,
)


def _catalog(backend: str) -> Any:
    """The cheat catalog of the backend (a module with ``CHEATS`` and ``BASES``)."""
    return import_module("kernforge.testing.redteam_" + ("cuda" if backend == "cuda" else "c"))


def _header(prov: dict, backend: str, seconds: float) -> str:
    git = prov["git"]
    rev = f"{(git['revision'] or 'unknown')[:12]}{' (local changes)' if git['dirty'] else ''}"
    return "\n".join([
        f"# Red-team suite on the {backend} backend",
        "",
        ("Every cheating candidate of `kernforge.testing.redteam_"
        f"{'cuda' if backend == 'cuda' else 'c'}` validated with every integrity gate "
        "(`kernforge.replay.validate`); see docs/integrity.md for the gates and reason codes."),
        "",
        (f"- Device: {prov['device']} ({prov['identity'].get('cores', '?')} cores); "
        f"compiler: {prov['compiler']}; driver: {prov['driver'] or '-'}"),
        f"- Date: {prov['date']}; kernforge {prov['kernforge_version']}, git {rev}",
        f"- Command: `{' '.join(prov['command'])}` ({seconds:.0f} s)",
        "",
    ])


def _child(backend: str, name: str, seed: int) -> int:
    """Run one cheat with the static checks off and print ``STATUS REASON`` (child mode)."""
    catalog = _catalog(backend)
    cheat = next(c for c in catalog.CHEATS if c.name == name)
    with tempfile.TemporaryDirectory(prefix="kernforge-redteam-") as tmp:
        recs = record_bases(Path(tmp), [b for b in catalog.BASES if b.name == cheat.base],
                            backend)
        row = run_cheat(cheat, recs, static=False, seed=seed)
    print(f"RESULT {row.status.value} {row.reason or '-'}", flush=True)
    return 0


def _dynamic_in_child(row: Outcome, backend: str, seed: int) -> None:
    """The static-checks-off outcome of an unsafe cheat, from a child process."""
    proc = subprocess.run([sys.executable, "-m", "kernforge", "integrity", "redteam",
                           "--backend", backend, "--seed", str(seed), "--child", row.cheat.name], capture_output=True, text=True,
                          timeout=600, check=False)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is not None:
        _, status, reason = line.split()
        row.dynamic = (Status(status), reason)
    elif proc.returncode < 0:
        row.dynamic = (Status.RUNTIME_FAILED,
                       f"child process killed by {signal.Signals(-proc.returncode).name}")
    else:
        row.dynamic = (Status.RUNTIME_FAILED, f"child process exit {proc.returncode}")


#: a guess of one sanitizer run's seconds before one was measured (cuda: compute-sanitizer's
#: start, CuPy's, the compile and one instrumented launch; cpu: a TSan/ASan build and run)
GUESS_TOOL_S = {"cuda": 6.0, "cpu": 1.5}
OTHER_S = 1.0  # the other gates of one validation, about


def _say(text: str) -> None:
    """A progress line on stderr, flushed (shown as it happens in a log or a pipe too)."""
    print(text, file=sys.stderr, flush=True)


class Progress:
    """The red team's progress: the expected time before it starts, one line per cheat after
    it, the time left re-estimated from the cheats done."""

    def __init__(self, backend: str, cheats: list[Any], dynamic: bool) -> None:
        if backend == "cuda":
            from ..backends import sanitize_cuda

            where = sanitize_cuda.find_tool()
            self.tools: tuple[str, ...] = sanitize_cuda.TOOLS if where else ()
            tool = f"compute-sanitizer {where}" if where else \
                "compute-sanitizer NOT FOUND: the gate checks nothing here"
        else:
            from ..backends import sanitize_cpu

            self.tools = sanitize_cpu.TOOLS
            tool = "ThreadSanitizer and AddressSanitizer builds"
        from ..backends.sanitize import timeout_s

        self.reaching = {c.name for c in cheats if reaches_sanitizer(c)}
        runs = len(self.reaching) + (len(cheats) if dynamic else 0)
        self.t0 = time.perf_counter()
        self.per_tool = GUESS_TOOL_S["cuda" if backend == "cuda" else "cpu"]
        self.done: list[float] = []
        self.left = cheats
        expected = runs * (len(self.tools) * self.per_tool + OTHER_S) + len(cheats) * OTHER_S
        _say(f"kernforge redteam: {len(cheats)} cheat(s) on {backend}; {len(self.reaching)} "
             f"reach the sanitizer gate ({len(self.tools)} run(s) each: "
             f"{', '.join(self.tools) or 'none'}; {tool}; at most {timeout_s():g} s a run)"
             + ("; --dynamic validates each again with the static checks off" if dynamic
                else "") + f". Expected about {expected:.0f} s ({self.per_tool:g} s per "
             f"sanitizer run, a guess until one is measured)")

    def __call__(self, i: int, n: int, row: Outcome) -> None:
        seconds = float(row.extra.get("seconds") or 0.0)
        name = row.cheat.name
        if name in self.reaching and self.tools:
            self.done.append(seconds)
        self.left = [c for c in self.left if c.name != name]
        per = (sum(self.done) / len(self.done)) if self.done else \
            len(self.tools) * self.per_tool + OTHER_S
        remaining = sum(per if c.name in self.reaching else OTHER_S for c in self.left)
        caught = "caught" if row.caught else \
            f"NOT CAUGHT (expected {row.cheat.status.value} {'/'.join(row.cheat.reasons)})"
        sanitizer = row.extra.get("sanitize") or \
            (first_line(row.message) if row.reason.startswith("sanitizer:") else "")
        _say(f"[{i:2d}/{n}] {name} ({row.cheat.base}): {row.status.value} "
             f"{row.reason or '-'} {row.verdict}, {caught}, {seconds:.1f} s"
             + (f"; sanitizer: {sanitizer}" if sanitizer else "")
             + f"; elapsed {time.perf_counter() - self.t0:.0f} s, about {remaining:.0f} s "
               f"left")


def first_line(text: str) -> str:
    return text.splitlines()[0][:200] if text else ""


def add_parser(cmds: argparse._SubParsersAction) -> None:
    """``kernforge integrity redteam``."""
    ap = cmds.add_parser("redteam", help="validate every cheating candidate of the catalog",
                         description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dynamic", action="store_true",
                    help="also validate with the static checks off")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fresh inputs")
    ap.add_argument("--only", nargs="*", default=(), help="run only these cheats")
    ap.add_argument("--out", type=Path, help="write the Markdown table here")
    ap.add_argument("--json", type=Path, help="write the rows as a figure file here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """The table; exit 1 when a cheat was not rejected with its expected Status and reason."""
    if args.child:
        return _child(args.backend, args.child, args.seed)
    catalog = _catalog(args.backend)
    t0 = time.perf_counter()
    chosen = [c for c in catalog.CHEATS if not args.only or c.name in args.only]
    progress = Progress(args.backend, chosen, args.dynamic)
    _say(f"recording {len(catalog.BASES)} base application(s) ...")
    rows = run_suite(catalog.CHEATS, catalog.BASES, args.backend, dynamic=args.dynamic,
                     seed=args.seed, only=args.only, progress=progress)
    for row in rows:
        if args.dynamic and row.dynamic is None:
            _say(f"{row.cheat.name}: static checks off, in a child process ...")
            _dynamic_in_child(row, args.backend, args.seed)
    seconds = time.perf_counter() - t0
    prov = provenance(get_backend(args.backend), command=["kernforge", *sys.argv[1:]])
    text = table(rows, dynamic=args.dynamic)
    notes = [f"- {r.cheat.name}: {r.cheat.note}" for r in rows if r.cheat.note]
    caught = sum(r.caught for r in rows)
    summary = f"**{caught} of {len(rows)} cheats rejected with the expected Status and reason.**"
    _say(f"done in {seconds:.0f} s")
    print(text, flush=True)
    print(summary, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        body = [_header(prov, args.backend, seconds), text, "", summary]
        if notes:
            body += ["", "Notes:", *notes]
        args.out.write_text("\n".join(body) + "\n")
    if args.json:
        write_figure(args.json, {"kind": "redteam", "caught": caught, "cases": len(rows)},
                     {"rows": [{"case": r.cheat.name, "base": r.cheat.base,
                                "status": r.status.value, "reason": r.reason,
                                "verdict": r.verdict, "caught": r.caught,
                                "expected": [r.cheat.status.value, *r.cheat.reasons],
                                "dynamic": list(r.dynamic) if r.dynamic else None,
                                "message": r.message} for r in rows]}, prov)
    return 0 if caught == len(rows) else 1

