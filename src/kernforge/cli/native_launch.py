"""``kernforge run --deploy NATIVE_SPEC -- COMMAND`` and ``--print-env``: any program, with the
interposer replacing the spec's launches (:mod:`kernforge.deploy.interposed` does it; this
module prints). The program starts after this module has run, so it imports nothing more
(docs/deploy.md, "Start-up cost"; tests/cli/test_run_lean.py guards it).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def deploy(spec_path: Path, command: Sequence[str]) -> int:
    """Run ``command`` with the interposer replacing the spec's launches; print its counts."""
    from ..deploy import interposed

    status, counts = interposed.run_deployed(spec_path, command)
    _report(spec_path, status, counts)
    return status


def _report(spec_path: Path, status: int, counts: dict[str, Any]) -> None:
    """The interposer's counts on stderr, as they are (no markup, no wrapping)."""
    replaced = sum(e.get("replaced", 0) for e in counts.get("entries", []))
    lines = [f"kernforge deploy report ({spec_path}): {replaced} launch(es) ran a tuned "
             f"configuration; {counts.get('fallbacks', 0)} launch(es) of a deployed kernel ran "
             + "unchanged (another problem, or its entry was disabled)"]
    for e in counts.get("entries", []):
        lines.append(f"  {e['name']}: {e['replaced']} replaced"
                     + (f", {e['load_failures']} load failure(s)"
                        if e.get("load_failures") else "")
                     + (", the tuned launch failed: the original ran instead"
                        if e.get("launch_failures") else ""))
    if not counts:  # each process that used the driver writes them when it exits normally
        lines.append(f"  (no counts: the program exited with status {status}; no process of it "
                     "reported any: none used the CUDA driver, or the one that did was killed "
                     "or ended through _exit)")
    sys.stderr.write("".join(f"{line}\n" for line in lines))
    sys.stderr.flush()


def print_env(spec_path: Path) -> int:
    """Shell lines that deploy the spec into any command started after them (job scripts),
    with the interposer's line file written beside the spec."""
    from ..deploy import interposed

    for line in interposed.env_lines(spec_path):
        print(line)
    return 0
