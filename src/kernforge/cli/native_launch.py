"""``kernforge run --deploy NATIVE_SPEC -- COMMAND`` and ``--print-env``: any program, with the
interposer replacing the spec's launches.

The program starts after this module has run, so it imports only what builds the interposer's
environment (the spec's checks, the line file, the library): no rich, no numpy, nothing of the
tuning (docs/deploy.md, "Start-up cost"; tests/cli/test_run_lean.py guards it).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def spec_is_native(path: str | os.PathLike[str]) -> bool:
    from ..deploy import native as nd

    return nd.is_native_spec(Path(path))


def deploy(spec_path: Path, command: Sequence[str]) -> int:
    """Run ``command`` with the interposer replacing the spec's launches; print its counts."""
    from ..deploy import native as nd
    from ..record import interposer
    from ..replay.native_deploy import deploy_env

    with tempfile.TemporaryDirectory(prefix="kf-deploy-") as tmp:
        log = Path(tmp) / "log.json"
        lib, extra = deploy_env(spec_path, Path(tmp) / "deploy.tsv", log)
        env = interposer.preload_env(lib, extra)
        env.pop("KERNFORGE_RECORD_DIR", None)
        status = interposer.run_preloaded(list(command), env)
        counts: dict[str, Any] = nd.read_log(log)
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
    from ..replay.native_deploy import deploy_env

    lib, extra = deploy_env(spec_path, spec_path.with_suffix(".interposer.tsv"))
    print(f"export LD_PRELOAD={shlex.quote(str(lib))}${{LD_PRELOAD:+:$LD_PRELOAD}}")
    print(f"export KERNFORGE_DEPLOY={shlex.quote(extra['KERNFORGE_DEPLOY'])}")
    print("# optional: export KERNFORGE_DEPLOY_LOG=deploy-log.json  (counts, written at exit)")
    return 0
