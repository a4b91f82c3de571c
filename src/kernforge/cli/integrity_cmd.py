"""``kernforge integrity {validate,lint,regen,ledger}``: the integrity gates from the shell.

- ``validate UNIT [--source FILE] [--opt K=V] ...``: every gate on a candidate of one recorded
  unit of either kind (docs/integrity.md); exit 0 when accepted, 5 when rejected by a
  correctness or integrity gate, 6 when rejected otherwise (compile, launch, conclusive
  regression), 9 when the speed verdict is inconclusive (busy device, noisy runs): neither
  accepted nor rejected;
- ``lint FILE --language c|cuda``: the static checks alone;
- ``regen FIGURE``: re-run the command recorded in a figure file;
- ``ledger FILE``: print a ledger.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from ..core import Status
from ..core.fmt import fmt_time
from ..core.textfile import read_text_file
from ..harness.ledger import Ledger
from ..harness.provenance import read_figure, regenerate
from ..harness.static_checks import check_source
from ..harness.verdict import ci_label
from ..pipeline.units import ValidateRequest, Validation, validate_unit
from . import redteam_cmd
from .checks import THREADS, check_defines, float_range, int_range, writable_file
from .isolation import add_isolation_args, isolation
from .output import console, err_console, parse_pairs
from .replay_cmd import tolerance_overrides


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("integrity", help="validate candidates, lint sources, regenerate figures",
                       description="The measurement-integrity gates (docs/integrity.md).")
    cmds = p.add_subparsers(dest="integrity_command", metavar="SUBCOMMAND")
    v = cmds.add_parser("validate", help="run every integrity gate on a candidate variant")
    v.add_argument("unit", help="one recorded unit (directory)")
    v.add_argument("--source", metavar="FILE", help="candidate source (default: recorded)")
    v.add_argument("--define", action="append", metavar="NAME=VALUE")
    v.add_argument("--allow-unused-define", action="store_true",
                   help="warn, instead of failing, on a --define the source never references")
    v.add_argument("--opt", action="append", metavar="NAME=VALUE")
    v.add_argument("--threads", type=THREADS, default=None, help="CPU: OpenMP threads")
    v.add_argument("--tolerance", action="append", metavar="[BUF=]SPEC")
    v.add_argument("--passes", type=int_range(2), default=7,
                   help="interleaved passes per look (default 7): the first look is taken "
                        "at 10 passes at least (a 99%% interval needs them), then up to 3x "
                        "PASSES while the verdict is inconclusive")
    v.add_argument("--band", type=float_range(0.0, 1.0), default=0.02,
                   help="regression band (default 0.02)")
    v.add_argument("--claimed", type=float, default=None, help="speedup to confirm")
    v.add_argument("--baseline", metavar="FILE", help="prior-best store (JSON)")
    v.add_argument("--ledger", metavar="FILE", help="append the verdict to this JSONL ledger")
    v.add_argument("--figure", metavar="FILE", help="write the figure with provenance here")
    v.add_argument("--seed", type=int, default=None, help="seed of the fresh inputs")
    v.add_argument("--no-static", action="store_true", help="skip the static checks")
    v.add_argument("--require-idle", action="store_true", help="reject on a busy device")
    add_isolation_args(v)
    v.set_defaults(func=run_validate)
    lint = cmds.add_parser("lint", help="static checks of a kernel source")
    lint.add_argument("file")
    lint.add_argument("--language", choices=("c", "cuda"), default=None,
                      help="default: from the extension (.cu/.cuh: cuda)")
    lint.add_argument("--tolerant", action="store_true",
                      help="outputs are verified under a tolerance: fast-math is allowed")
    lint.set_defaults(func=run_lint)
    regen = cmds.add_parser("regen", help="re-run the command that produced a figure file")
    regen.add_argument("figure")
    regen.set_defaults(func=run_regen)
    led = cmds.add_parser("ledger", help="print a ledger of validated candidates")
    led.add_argument("file")
    led.set_defaults(func=run_ledger)
    redteam_cmd.add_parser(cmds)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_validate(args: argparse.Namespace) -> int:
    writable_file(args.figure, "--figure")
    writable_file(args.ledger, "--ledger")
    defines = parse_pairs(args.define, "define", typed=False)
    req = ValidateRequest(
        source=Path(args.source) if args.source else None,
        tolerance=tolerance_overrides(args.tolerance), passes=args.passes, band=args.band,
        options=parse_pairs(args.opt, "opt", typed=True), defines=defines,
        threads=args.threads, claimed=args.claimed, baseline=args.baseline,
        ledger=args.ledger, figure=args.figure, seed=args.seed, static=not args.no_static,
        require_idle=args.require_idle, command=tuple(_command(args)))
    v = validate_unit(args.unit, req, isolation=lambda backends: isolation(args, backends=backends),
                      check_code=lambda unit, code: check_defines(
                          unit.unit, code, defines, allow=args.allow_unused_define))
    _print_validation(v)
    if v.accepted:
        return 0
    if v.verdict == "inconclusive":
        return 9  # neither accepted nor rejected: measure again (the reason is printed)
    if v.status is Status.WRONG_RESULT or v.reason.startswith("static:"):
        return 5
    # a variant the backend refuses (unknown or malformed option): bad input, as in replay
    return 2 if v.status is Status.INVALID_CONFIG else 6


def _command(args: argparse.Namespace) -> list[str]:
    """The command line that reproduces this validation (paths made absolute)."""
    cmd = ["kernforge", "integrity", "validate", str(Path(args.unit).resolve())]
    for flag, value in (("--source", args.source), ("--ledger", args.ledger),
                        ("--figure", args.figure), ("--baseline", args.baseline)):
        if value:
            cmd += [flag, str(Path(value).resolve())]
    for flag, items in (("--define", args.define), ("--opt", args.opt),
                        ("--tolerance", args.tolerance)):
        for item in items or ():
            cmd += [flag, item]
    for flag, value in (("--threads", args.threads), ("--passes", args.passes),
                        ("--band", args.band), ("--claimed", args.claimed),
                        ("--seed", args.seed)):
        if value is not None:
            cmd += [flag, str(value)]
    cmd += [f for f, on in (("--no-static", args.no_static),
                            ("--require-idle", args.require_idle)) if on]
    return cmd


def _print_validation(v: Validation) -> None:
    style = "green" if v.accepted else "yellow" if v.verdict == "inconclusive" else "bold red"
    console.print(f"[{style}]{v.verdict}[/] {escape(v.case)}: {v.status.value}"
                  + (f" [bold]{escape(v.reason)}[/]" if v.reason else ""))
    if v.message and (v.speed is None or v.message != v.speed.reason):  # said once, below
        console.print(escape(v.message), soft_wrap=True)
    if v.speed is not None:
        console.print(f"speed: {escape(v.speed.reason)}", soft_wrap=True)
    if v.ab is not None:
        console.print(f"speedup {v.ab.speedup:.4f}x ({ci_label(v.ab.confidence)} "
                      f"{v.ab.ci_low:.4f}-"
                      f"{v.ab.ci_high:.4f}, {v.ab.passes} interleaved passes): recorded "
                      f"{fmt_time(v.ab.median_a)}, candidate {fmt_time(v.ab.median_b)}")
    for gate, note in v.notes.items():
        if gate not in ("integrity", "seconds"):
            console.print(f"  {gate}: {escape(_note(note))}", soft_wrap=True)
    if v.roofline is not None:
        console.print(f"  roofline: {escape(_words(v.roofline.verdict, v.roofline.note))}",
                      soft_wrap=True)
    if v.idle is not None:
        console.print(f"  idle: {escape(_note(v.idle.to_json()))}", soft_wrap=True)


def _words(*parts: object) -> str:
    return " ".join(str(p) for p in parts if p not in (None, ""))


def _note(note: Any) -> str:
    """A gate's note in words, not as a Python dict: an idle check's (``busy_during``,
    ``idle``) as "busy (44% busy; /proc/stat ...)", another's as "key: value; ..."."""
    if isinstance(note, dict) and {"idle", "utilisation", "method"} <= note.keys():
        state = {True: "idle", False: "busy", None: "not checked"}.get(note["idle"], "?")
        util = note["utilisation"]
        said = "; ".join(str(p) for p in (f"{util:.0%} busy" if isinstance(util, int | float)
                                          else "", note["method"], note.get("note")) if p)
        return f"{state} ({said})" if said else state
    if isinstance(note, dict):
        return "; ".join(f"{k}: {_note(v)}" for k, v in note.items() if v not in (None, ""))
    return str(note)


def run_lint(args: argparse.Namespace) -> int:
    path = Path(args.file)
    code = read_text_file(path, hint="give a source file")
    language = args.language or ("cuda" if path.suffix in (".cu", ".cuh") else "c")
    found = check_source(code, language, bitwise=not args.tolerant)
    for f in found:
        console.print(f"{escape(str(path))}:{f.line}: [bold red]{f.reason}[/] "
                      f"{escape(f.message)}", soft_wrap=True)
    if not found:
        console.print(f"{escape(str(path))}: no findings")
    return 5 if found else 0


def run_regen(args: argparse.Namespace) -> int:
    before = read_figure(args.figure)
    proc = regenerate(args.figure)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode not in (0, 5, 6):
        err_console.print(f"[bold red]the command failed (exit {proc.returncode})[/]: "
                          f"{escape(shlex.join(before['provenance']['command']))}")
        return 6
    after = read_figure(args.figure)
    old, new = before.get("figure", {}), after.get("figure", {})
    console.print(f"before: {old.get('verdict')} {old.get('speedup')} "
                  f"({before['provenance'].get('date')})")
    console.print(f"after:  {new.get('verdict')} {new.get('speedup')} "
                  f"({after['provenance'].get('date')})")
    return 0


def run_ledger(args: argparse.Namespace) -> int:
    entries = Ledger(args.file).entries(must_exist=True)
    table = Table(title=f"ledger {args.file}")
    for col in ("time", "case", "verdict", "status", "reason", "speedup", "message"):
        table.add_column(col)
    for e in entries:
        sp = e.get("speedup")
        table.add_row(escape(str(e.get("time", ""))), escape(str(e.get("case", ""))),
                      escape(str(e.get("verdict", ""))), escape(str(e.get("status", ""))),
                      escape(str(e.get("reason", ""))), f"{sp:.4f}" if sp else "-",
                      escape(str(e.get("message", ""))[:80]))
    console.print(table)
    return 0
