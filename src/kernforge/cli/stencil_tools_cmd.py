"""``kernforge stencil {probe,precompile,audit,summary}``: the matrix's working tools.

- ``probe``: time a cell's dispatched operator against variants on the GPU
  (:mod:`kernforge.forge.probe`), each variant in a supervised worker unless ``--in-process``
  (a crash or a hang costs that variant only);
- ``precompile``: compile a forge round's candidates on the host for ``--build nvcc``
  (:mod:`kernforge.forge.precompile`);
- ``audit``: registers of the table's operators built by nvcc against NVRTC, no GPU needed
  (:mod:`kernforge.forge.audit`);
- ``summary``: a forge run's accepted operators against the naive kernel they started from
  (:mod:`kernforge.forge.summary`).

The arguments are parsed here; each tool's module takes them as keyword arguments.
"""

from __future__ import annotations

import argparse
from importlib import import_module
from pathlib import Path
from typing import Any

from ..stencil.matrix import TABLE_PATH
from .isolation import add_isolation_args, isolation

TOOLS = {
    "probe": ("probe", "time a cell's operator against variants (GPU)"),
    "precompile": ("precompile", "compile a forge round's candidates ahead (nvcc)"),
    "audit": ("audit", "nvcc against NVRTC registers of the table's operators"),
    "summary": ("summary", "a forge run's operators against the naive kernel"),
}


def _module(name: str) -> Any:
    return import_module(f"kernforge.forge.{TOOLS[name][0]}")


def _probe_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("cell", help="a cell id, e.g. star_2/512x512x512/fp32")
    ap.add_argument("variants", nargs="*", help="k=v,... [+probe] or DESIGN[k=v,...]")
    ap.add_argument("--passes", type=int, default=25, help="interleaved timed passes")
    add_isolation_args(ap)  # runs candidate code: supervised by default


def _precompile_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--stencils", nargs="*")
    ap.add_argument("--shapes", nargs="*")
    ap.add_argument("--precisions", nargs="*")
    ap.add_argument("--changes", required=True,
                    help="the forge run's --changes; only its first round is compiled")
    ap.add_argument("--table", type=Path, default=TABLE_PATH)
    ap.add_argument("--seed-design", default=None, help="the forge run's --seed-design")
    ap.add_argument("--cache", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=None, help="parallel nvcc (default: cores)")


def _audit_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--table", type=Path, default=TABLE_PATH)
    ap.add_argument("--cell-ids", default=None, help="comma-separated (default: the table's)")
    ap.add_argument("--nvrtc", default=None, help="libnvrtc.so path")
    ap.add_argument("--json", type=Path, default=None)


def _summary_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--table", type=Path, required=True, help="the run's matrix.json")
    ap.add_argument("--log", type=Path, required=True, help="the run's perf-log.jsonl")
    ap.add_argument("--md", type=Path)
    ap.add_argument("--png", type=Path)


def run_probe(args: argparse.Namespace) -> int:
    """``stencil probe``: the variants in a supervised worker (``--in-process``: here)."""
    with isolation(args) as iso:
        return int(_module("probe").run(args.cell, args.variants, passes=args.passes,
                                        isolate=iso))


def run_precompile(args: argparse.Namespace) -> int:
    return int(_module("precompile").run(
        args.changes, args.cache, stencils=args.stencils, shapes=args.shapes,
        precisions=args.precisions, table=args.table, seed_design=args.seed_design,
        jobs=args.jobs))


def run_audit(args: argparse.Namespace) -> int:
    return int(_module("audit").run(args.table, cell_ids=args.cell_ids, nvrtc=args.nvrtc,
                                    json_out=args.json))


def run_summary(args: argparse.Namespace) -> int:
    return int(_module("summary").run(args.table, args.log, md=args.md, png=args.png))


PARSERS = {"probe": (_probe_args, run_probe), "precompile": (_precompile_args, run_precompile),
           "audit": (_audit_args, run_audit), "summary": (_summary_args, run_summary)}


def add_parsers(cmds: argparse._SubParsersAction) -> None:
    """One subcommand per tool, its description the tool module's docstring."""
    for name, (_, help_text) in TOOLS.items():
        add, func = PARSERS[name]
        p = cmds.add_parser(name, help=help_text,
                            description=_module(name).__doc__ or help_text,  # the whole docstring
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        add(p)
        p.set_defaults(func=func)
