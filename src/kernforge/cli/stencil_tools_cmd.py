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
"""

from __future__ import annotations

import argparse
from importlib import import_module
from typing import Any

from .isolation import add_isolation_args, isolation

TOOLS = {
    "probe": ("probe", "time a cell's operator against variants (GPU)"),
    "precompile": ("precompile", "compile a forge round's candidates ahead (nvcc)"),
    "audit": ("audit", "nvcc against NVRTC registers of the table's operators"),
    "summary": ("summary", "a forge run's operators against the naive kernel"),
}


def _module(name: str) -> Any:
    return import_module(f"kernforge.forge.{TOOLS[name][0]}")


def add_parsers(cmds: argparse._SubParsersAction) -> None:
    """One subcommand per tool; each module owns its arguments (``add_arguments``) and its run."""
    for name, (_, help_text) in TOOLS.items():
        mod = _module(name)
        p = cmds.add_parser(name, help=help_text,
                            description=mod.__doc__ or help_text,  # the whole docstring
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(func=mod.run)
        if name == "probe":  # runs candidate code: supervised by default
            add_isolation_args(p)
            p.set_defaults(func=run_probe)


def run_probe(args: argparse.Namespace) -> int:
    """``stencil probe``: the variants in a supervised worker (``--in-process``: here)."""
    with isolation(args) as iso:
        return int(_module("probe").run(args, isolate=iso))
