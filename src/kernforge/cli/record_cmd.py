"""``kernforge record -o DIR [filters] -- COMMAND ...``: record an unchanged application."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError, Interrupted
from ..pipeline.run_app import (
    command_program,
    keep_interrupted,
    record_command,
    runs_in_process,
    spooled,
)
from ..record import find_recordings
from .checks import writable_dir
from .damaged import EXIT_SKIPPED
from .output import console

EXIT_APP_FAILED = 8  # the recorded application failed (its own status printed)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="run an application and record its kernel launches",
                       description="Run any command (a binary, a script, python app.py) with "
                                   "kernforge's driver interposer preloaded: every kernel launch "
                                   "through the CUDA driver that matches the filters becomes a "
                                   "replay unit (native programs, CuPy, cupyx, PyTorch, Triton). "
                                   "Before any command, env's -i, -u NAME and NAME=VALUE are "
                                   "applied by kernforge, the interposer's environment added "
                                   "to env's. "
                                   "A Python command (python ..., app.py, or either after env "
                                   "[-i] [-u NAME] NAME=VALUE...) also runs under the "
                                   "in-process capture (kernforge.Kernel, and CuPy "
                                   "RawKernel/RawModule with their source); a launch is "
                                   "recorded once. A Python application started by another "
                                   "command (a shell script) is recorded at the driver level "
                                   "only.")
    p.add_argument("-o", "--out", default="recordings", help="recordings directory "
                                                            "(default: recordings)")
    p.add_argument("--kernels", default=None, metavar="PATTERN",
                   help="record only kernels whose name matches this glob pattern (the mangled "
                        "name or its readable form, e.g. '*solve*')")
    p.add_argument("--max-instances", type=int, default=4, metavar="N",
                   help="record at most N launches per kernel, N >= 1 (default 4)")
    p.add_argument("--skip", type=int, default=0, metavar="N",
                   help="skip the first N launches of each kernel (default 0)")
    p.add_argument("--max-mb", type=int, default=16384, metavar="MIB",
                   help="record at most this much device memory in all, before and after "
                        "counted (default 16384); launches beyond it run unrecorded")
    p.add_argument("--sequence", type=int, default=None, metavar="N",
                   help="record N consecutive launches of each kernel (and the launches of "
                        "other kernels between them on its stream) as one sequence unit, "
                        "N >= 2; a copy, synchronization, free or launch elsewhere ends it "
                        "early (docs/recording-native.md)")
    p.add_argument("--all-allocations", action="store_true",
                   help="record every live device allocation with each launch (for pointers "
                        "kept in places kernforge does not scan)")
    p.add_argument("--pass-status", action="store_true",
                   help="exit with the application's own status (default: 0 when it "
                        "succeeded, 8 when it failed, its status printed; so that an "
                        "application's status is never taken for one of kernforge's own, "
                        "e.g. 3, backend unavailable)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the application command, after --")
    p.set_defaults(func=run)


# why a command that is not Python (a shell script, a binary, env ... ./app.sh) may record
# nothing although it ran: no launch reached the driver, and a Python application it starts
# runs without the in-process capture, which records the launches that never reach the driver
_DRIVER_ONLY = ("note: nothing was recorded: no kernel launch reached the CUDA driver. "
                "{command} is not a Python command, so only the driver interposer watched it; "
                "a Python application it starts runs without the in-process capture, and its "
                "kernforge.Kernel launches (the CPU backend), which do not go through the "
                "driver, are not recorded (CuPy kernels, RawKernel/RawModule included, would "
                "be: at the driver level, with the source NVRTC compiled). Record the application directly: kernforge "
                "record -o DIR -- python app.py ARGS (env NAME=VALUE ... before python is "
                "understood)")


def _summary(summaries: list[dict[str, Any]]) -> str:
    launches = sum(s.get("launches", 0) for s in summaries)
    kernels = {k["name"] for s in summaries for k in s.get("kernels", [])}
    extra = []
    for key, what in (("over_budget", "over the --max-mb budget"),
                      ("unknown_layout", "with an unknown parameter layout"),
                      ("failed", "that failed or could not be written"),
                      ("cooperative", "cooperative (not recorded)"),
                      ("graphs", "CUDA graph launches (not recorded)")):
        n = sum(s.get(key, 0) for s in summaries)
        if n:
            extra.append(f"{n} {what}")
    return (f"{launches} launch(es) of {len(kernels)} kernel(s) seen"
            + (f"; {', '.join(extra)}" if extra else ""))


def _check_pattern(pattern: str, driver: list[dict[str, Any]],
                   inprocess: list[dict[str, Any]]) -> None:
    """Nothing recorded with ``--kernels``: when kernels were launched and none matches the
    pattern (a typo, a readable name where the mangled one differs), bad input, the kernels
    that did run named; not an empty recording that exits 0."""
    matched = any(k.get("matches", True) for s in driver for k in s.get("kernels", [])) or \
        any(s.get("kernels") for s in inprocess)
    names = sorted({k["name"] for s in driver for k in s.get("kernels", [])}
                   | {n for s in inprocess for n in s.get("unmatched", [])})
    if matched or not names:
        return
    shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
    raise ConfigError(f"no kernel the application launched matches --kernels {pattern!r}: "
                      f"nothing was recorded",
                      hint=f"the kernels it launched: {shown}; --kernels is a glob on the "
                           f"whole kernel name ('*part*' for a part of it), quoted for the shell")


def _launched(summaries: list[dict[str, Any]]) -> bool:
    """Whether any launch reached the driver (recorded, filtered out, or only counted)."""
    return any(s.get(key, 0) for s in summaries for key in ("launches", "cooperative", "graphs"))


def _units(out: Path) -> set[Path]:
    return set(find_recordings(out)) if out.is_dir() else set()


def _interrupted(out: Path, before: set[Path], earlier: set[str]) -> Interrupted:
    """Ctrl-C: what the application recorded is kept (units complete or absent, the spool's
    complete units turned into units, the spool then removed), and said so."""
    problems, spool = keep_interrupted(out, earlier)
    n = len(_units(out) - before)
    what = (f"{n} unit recorded is kept" if n == 1 else f"{n} units recorded are kept") + \
        f" in {out}"
    if problems:
        what += (f"; {len(problems)} spooled launch(es) could not be turned into units "
                 f"(left in {spool})")
    return Interrupted(what)


def run(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    writable_dir(args.out, "-o")  # before the application runs, not after it
    out = Path(args.out)
    before, earlier = _units(out), spooled(out)
    try:
        status, paths, problems, summaries = record_command(
            command, out, kernels=args.kernels, max_instances=args.max_instances,
            skip=args.skip, max_mb=args.max_mb, record_all=args.all_allocations,
            sequence=args.sequence)
    except KeyboardInterrupt:
        raise _interrupted(out, before, earlier) from None
    tail = "" if status == 0 else f" (the application {_status_text(status)})"
    if problems:
        tail += (f"; {len(problems)} spooled launch(es) were damaged or incomplete and "
                 f"skipped (below)")
    inprocess = [s for s in summaries if s.get("origin") == "in-process"]
    summaries = [s for s in summaries if s.get("origin") != "in-process"]
    if args.kernels is not None and not paths and status == 0 and not problems:
        _check_pattern(args.kernels, summaries, inprocess)
    if summaries:
        console.print(f"driver: {_summary(summaries)}", markup=False)
    elif not paths:
        console.print("nothing was launched through the CUDA driver", markup=False)
    what = "unit(s), sequences of launches," if args.sequence else "kernel launch(es)"
    console.print(f"recorded {len(paths)} {what} into {args.out}{tail}", markup=False)
    if not paths and not _launched(summaries) and not runs_in_process(command):
        console.print(_DRIVER_ONLY.format(command=command_program(command)), markup=False,
                      soft_wrap=True)
    for p in paths:
        console.print(f"  {p}", markup=False)
    for line in problems:
        console.print(f"  skipped, not turned into a unit: {line}", markup=False, soft_wrap=True)
    if before and paths:  # not an error (one directory may gather runs), but not silent
        console.print(f"note: {args.out} already held {len(before)} unit(s) from an earlier "
                      f"recording; the new ones are beside them, and every command given "
                      f"{args.out} uses both (record into a new -o to keep runs apart)",
                      markup=False)
    if status == 0:  # the application's own failure comes first
        return EXIT_SKIPPED if problems else 0
    if args.pass_status:
        return status if status > 0 else 128 - status  # killed by a signal: as a shell says
    console.print(f"kernforge record exits {EXIT_APP_FAILED}: the application "
                  f"{_status_text(status)} (--pass-status exits with its own status)",
                  markup=False)
    return EXIT_APP_FAILED


def _status_text(status: int) -> str:
    return f"exited with status {status}" if status > 0 else f"was killed by signal {-status}"
