"""``kernforge app draft SUITE_DIR`` (manifests drafted from a suite's build files) and
``kernforge app batch MANIFEST... | --dir DIR`` (many manifests through the workflow, resumable,
under a device-time budget). See docs/applications.md, "Many programs"."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..apps import batch as batch_mod
from ..apps.batch_entries import entries, manifests_in
from ..apps.batch_report import exit_status, summary_lines
from ..apps.batch_store import DB_NAME, BatchStore, Program, in_use
from ..apps.budget import parse_duration
from ..apps.draft import draft_suite
from ..apps.draft_build import is_arch
from ..core import ConfigError
from .checks import writable_dir
from .output import console


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{exc.message} ({exc.hint})") from None


def _arch(text: str) -> str:
    """A GPU architecture as nvcc names it (``sm_90``, ``sm_90a``, ``compute_80``): what a
    Makefile's ARCH-like variable is recognized by, and a value the build can use."""
    if not is_arch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU architecture (write it as "
                                         "nvcc does: sm_90, sm_90a, compute_80)")
    return text


def register(sp: argparse._SubParsersAction) -> None:
    d = sp.add_parser("draft", help="draft a manifest per program of a suite, to review",
                      description="Drafts one manifest per program of SUITE_DIR (each "
                                  "subdirectory with a Makefile or CMakeLists.txt) from its "
                                  "build files, run target and what its sources print; marks "
                                  "every guess with REVIEW; refuses, with the reason, what it "
                                  "cannot draft.")
    d.add_argument("suite", type=Path, metavar="SUITE_DIR", help="the suite's directory")
    d.add_argument("--out", type=Path, default=Path("manifests"),
                   help="where the manifests go (default manifests/)")
    d.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="only programs whose directory matches (repeatable), e.g. '*-cuda'")
    d.add_argument("--arch", default="sm_90", type=_arch,
                   help="the GPU architecture a Makefile's ARCH-like variable is set to "
                        "(default sm_90)")
    d.add_argument("--force", action="store_true",
                   help="draft again over manifests already in --out (default: keep them)")
    d.set_defaults(func=draft)
    b = sp.add_parser("batch", help="run many manifests through the workflow, resumable",
                      description="Runs the manifests one after another (kernforge app run "
                                  "each) into one batch directory, under a device-time budget; "
                                  "the same command again resumes where it stopped.")
    b.add_argument("manifests", type=Path, nargs="*", metavar="MANIFEST",
                   help="the applications' TOML manifests (or --dir)")
    b.add_argument("--dir", type=Path, help="every *.toml manifest of this directory")
    b.add_argument("--out", type=Path, default=Path("runs/batch"),
                   help="the batch directory (default runs/batch)")
    b.add_argument("--budget", type=_duration, metavar="DURATION",
                   help="device time of this run of the batch (this allocation), e.g. 30m; "
                        "without it, what is left of the latest --budget (none given: no "
                        "limit)")
    b.add_argument("--program-budget", type=_duration, metavar="DURATION",
                   help="at most this much device time for one program, over all its runs "
                        "(default: at most a quarter of --budget at a time)")
    b.add_argument("--remeasure", action="append", default=[], metavar="GLOB",
                   help="run these finished programs again from the start (repeatable; "
                        "'*' for all)")
    b.add_argument("--status", action="store_true",
                   help="print the batch's summary and exit; runs nothing")
    b.set_defaults(func=batch)


def draft(args: argparse.Namespace) -> int:
    if args.suite.exists() and not args.suite.is_dir():
        raise ConfigError(f"{args.suite}: a file, not a directory",
                          hint="give the suite's directory, or one program's directory")
    if not args.suite.is_dir():
        raise ConfigError(f"{args.suite}: no such directory",
                          hint="give the suite's directory (its programs are subdirectories)")
    writable_dir(args.out, "--out")
    results = draft_suite(args.suite, args.out, only=args.only, arch=args.arch,
                          force=args.force)
    if not results:
        raise ConfigError(f"{args.suite}: no program directory" + (
            f" matches {', '.join(args.only)}" if args.only else ""),
            hint="a program is a subdirectory with a Makefile or CMakeLists.txt")
    console.print("| program | result | details |\n|---|---|---|", markup=False)
    for r in results:
        console.print(f"| {r.name} | {r.status} | {r.detail} |", markup=False,
                      soft_wrap=True)
    n = {s: sum(r.status == s for r in results) for s in ("drafted", "kept", "refused")}
    console.print(f"\n{n['drafted']} drafted, {n['kept']} kept, {n['refused']} refused, of "
                  f"{len(results)} program(s) in {args.suite}", markup=False)
    if n["drafted"]:
        console.print(f"review every line marked REVIEW (grep -n REVIEW {args.out}/*.toml), "
                      f"then: kernforge app batch --dir {args.out}", markup=False)
    return 0 if n["drafted"] or n["kept"] else 1


def _print_summary(out: Path, live: bool = True) -> list[Program]:
    store = BatchStore.open(out)
    try:
        programs = store.programs()
        (b, since), pb = store.allocation(), store.meta("program_budget_s")
        total = store.spent_s()
        lines = summary_lines(programs, budget_s=b, spent_s=total - since,
                              program_budget_s=None if pb is None else float(pb), live=live,
                              total_s=total)
    finally:
        store.close()
    console.print("\n".join(lines), markup=False, soft_wrap=True)
    return programs


def batch(args: argparse.Namespace) -> int:
    if args.status:
        if not (args.out / DB_NAME).is_file():
            raise ConfigError(f"--out {args.out}: no batch there ({DB_NAME} missing)",
                              hint="give the --out of a kernforge app batch")
        return exit_status(_print_summary(args.out, live=in_use(args.out)))
    if bool(args.manifests) == bool(args.dir):
        raise ConfigError("give the manifests, or --dir DIR (not both)",
                          hint="kernforge app batch a.toml b.toml, or kernforge app batch "
                               "--dir manifests/")
    writable_dir(args.out, "--out")
    paths = manifests_in(args.dir) if args.dir else list(args.manifests)
    run = batch_mod.Batch(args.out, entries(paths), budget_s=args.budget,
                          program_budget_s=args.program_budget,
                          remeasure=tuple(args.remeasure),
                          progress=lambda s: console.print(s, markup=False, highlight=False,
                                                           soft_wrap=True))
    done = run.run()
    console.print("", markup=False)
    _print_summary(args.out)
    console.print(f"reports: kernforge app report {args.out}/apps/* -o applications.md",
                  markup=False)
    return exit_status(done)
