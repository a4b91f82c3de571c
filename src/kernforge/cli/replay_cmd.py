"""``kernforge replay PATH [--define K=V] [--opt K=V] [--repeat K]``: replay, verify, time."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..core import ConfigError, Measurement, Status, Tolerance
from ..core.fmt import fmt_time
from ..core.jsonio import write_json_atomic
from ..pipeline.units import UnitReplay, replay_units
from .cache_arg import add_cache_arg
from .checks import NON_NEGATIVE, POSITIVE, THREADS, check_defines, load_all_units, writable_file
from .isolation import add_isolation_args, isolation
from .output import console, err_console, fmt_error, notes, parse_pairs
from .progress import line_progress


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay recorded kernels: verify and time a variant",
                       description="Replay every unit under PATH in isolation: restore the "
                                   "recorded memory, compile the (modified) variant, run, verify "
                                   "against the recorded outputs and time it. Exits non-zero "
                                   "when a variant fails, naming the buffer and the error.")
    p.add_argument("path", help="a recordings directory or one recorded unit")
    p.add_argument("--define", action="append", metavar="NAME=VALUE",
                   help="override a #define (repeatable); a name the source never "
                        "references is an error")
    p.add_argument("--allow-unused-define", action="store_true",
                   help="warn, instead of failing, on a --define the source never references")
    p.add_argument("--opt", action="append", metavar="NAME=VALUE",
                   help="override a compile option, e.g. opt_level=O3 (repeatable)")
    p.add_argument("--threads", type=THREADS, default=None, help="CPU: OpenMP threads")
    p.add_argument("--tolerance", action="append", metavar="[BUF=]SPEC",
                   help="verification policy: bitwise, abs:1e-6, rel:1e-5[,atol] or "
                        "norm:1e-4; BUF=SPEC for one buffer (repeatable)")
    p.add_argument("--repeat", type=POSITIVE, default=10, help="timed runs (default 10)")
    p.add_argument("--warmup", type=NON_NEGATIVE, default=3, help="warm-up runs (default 3)")
    p.add_argument("--no-flush", action="store_true",
                   help="do not flush the cache between runs (the same as --cache warm)")
    add_cache_arg(p)
    p.add_argument("--kernels", default=None, metavar="PATTERN",
                   help="replay only units whose kernel name matches this glob")
    p.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    p.add_argument("--dtype", default=None, metavar="DTYPE",
                   help="native units: compare written memory as this element type (e.g. "
                        "float32) when a --tolerance is given; bitwise otherwise")
    add_isolation_args(p)
    p.set_defaults(func=run)


_MODES = ("bitwise", "abs", "rel", "norm")


def tolerance_overrides(items: list[str] | None) -> Tolerance | dict[str, Tolerance] | None:
    if not items:
        return None
    per_buffer: dict[str, Tolerance] = {}
    given: dict[str, str] = {}
    whole: list[Tolerance] = []
    for item in items:
        buf, sep, spec = item.partition("=")
        if sep and ":" not in buf:
            if buf in _MODES and ":" not in spec:  # abs=1e-9: not a buffer named abs
                raise ConfigError(f"--tolerance {item}: {buf} is a tolerance mode, and its "
                                  f"value follows a colon",
                                  hint=f"write --tolerance {buf}:{spec} for every written "
                                       f"buffer, or --tolerance BUF={buf}:{spec} for one")
            if buf in given:  # the last one would silently win
                raise ConfigError(f"--tolerance names buffer {buf!r} twice ({given[buf]} and "
                                  f"{spec})",
                                  hint=f"give one --tolerance {buf}=SPEC")
            per_buffer[buf], given[buf] = Tolerance.parse(spec), spec
        else:
            whole.append(Tolerance.parse(item))
    if whole and (per_buffer or len(whole) > 1):
        raise ConfigError("give either one --tolerance SPEC for every written buffer, or "
                          "--tolerance BUF=SPEC per buffer, not both",
                          hint="name each buffer: --tolerance v=rel:1e-6 --tolerance w=abs:1e-9")
    return whole[0] if whole else per_buffer


def run(args: argparse.Namespace) -> int:
    defines = parse_pairs(args.define, "define", typed=False)
    options = parse_pairs(args.opt, "opt", typed=True)
    tolerance = tolerance_overrides(args.tolerance)
    writable_file(args.json, "--json")
    cache = _cache_mode(args)
    _check_dtype(args.dtype)
    units = load_all_units(args.path, args.kernels)
    for rec in units.recordings:
        check_defines(rec.name, rec.source.code, defines, allow=args.allow_unused_define)
    # a line per unit on stderr when stdout is not a terminal (kernforge replay R > table.txt):
    # the wait is shown, and stdout keeps the results alone
    with line_progress(err_console, enabled=not console.is_terminal) as lines:
        rows = replay_units(units, options=options, defines=defines, threads=args.threads,
                            tolerance=tolerance, dtype=args.dtype, warmup=args.warmup,
                            repeat=args.repeat, cache=cache,
                            isolation=lambda backends: isolation(args, backends=backends),
                            notes=notes(), progress=lines.step)
    _print_table(args.path, rows)
    if args.json:
        write_json_atomic(Path(args.json), [{"unit": r.unit, "kernel": r.kernel,
                                             **r.measurement.to_json(), **r.info()}
                                            for r in rows])
    return _exit_code([(r.unit, r.kernel, r.measurement) for r in rows])


def _check_dtype(dtype: str | None) -> None:
    """--dtype names a numeric element type (checked before anything runs)."""
    if dtype is None:
        return
    import numpy as np

    try:
        kind: str = np.dtype(dtype).kind
    except TypeError:
        kind = ""
    if kind not in ("i", "u", "f", "c"):
        raise ConfigError(f"--dtype {dtype!r} is not a numeric element type",
                          hint="e.g. --dtype float32, float64, int32 or uint8")


def _cache_mode(args: argparse.Namespace) -> str | None:
    """``--cache`` as given (None: not given, the unit's kept choice or auto)."""
    if args.no_flush and args.cache == "flushed":
        raise ConfigError("--no-flush and --cache flushed contradict each other",
                          hint="give one of them (--no-flush is --cache warm)")
    return "warm" if args.no_flush else args.cache


def _print_table(path: str, rows: list[UnitReplay]) -> None:
    """One table of every unit; the columns of a replay at recorded addresses (the time in
    the program, where the memory was placed) when a unit was replayed so."""
    placed = any(r.placement for r in rows)
    cols = ["unit", "kernel", "status", "median", "min", "max", "runs", "max error"] + \
        (["in app", "replay/app", "placed"] if placed else []) + ["cache"]
    right = ("median", "min", "max", "runs", "in app", "replay/app")
    table = Table(title=f"replay of {path}")
    for col in cols:
        table.add_column(col, justify="right" if col in right else "left",
                         no_wrap=col in ("unit", "status", "median"))
    for r in rows:
        m, app = r.measurement, r.in_program_s
        style = "green" if m.ok else "bold red"
        cells = [escape(r.unit), escape(r.kernel[:60]), f"[{style}]{m.status.value}[/]",
                 fmt_time(m.median if m.ok else None), fmt_time(m.min if m.ok else None),
                 fmt_time(m.max if m.ok else None), str(len(m.samples)), escape(fmt_error(m))]
        if placed:
            where = r.placement.get("relocated") if r.placement else None
            cells += [fmt_time(app), f"{m.median / app:.2f}" if m.ok and app else "-",
                      f"relocated {where}" if where else "recorded" if r.placement else "-"]
        table.add_row(*cells, escape(r.cache.protocol))
    console.print(table)
    for r in rows:
        console.print(f"  {escape(r.unit)}: cache {escape(r.cache.protocol)} "
                      f"({escape(r.cache.reason)})", soft_wrap=True)


def _exit_code(results: list[tuple[str, str, Measurement]]) -> int:
    code = 0
    for unit, _kernel, m in results:
        if m.ok:
            continue
        err_console.print(f"[bold red]{escape(unit)}: {m.status.value}[/] {escape(m.message)}")
        for c in m.failed_checks:
            err_console.print(f"  buffer {escape(c.describe())}")
        # a variant the backend refuses (unknown or malformed option) is bad input: 2
        code = max(code, 5 if m.status is Status.WRONG_RESULT
                   else 2 if m.status is Status.INVALID_CONFIG else 6)
    if not results:
        err_console.print("no recorded units matched")
        return 2
    return code
