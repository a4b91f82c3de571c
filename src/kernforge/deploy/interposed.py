"""A native deployment spec deployed into an unchanged program: the driver interposer
preloaded in deploy mode, the spec's launch lines beside it.

Every command that puts a native spec into a program (``kernforge run --deploy``,
``--print-env``, the application workflow's M4) builds its environment here. The program
starts after this module has run, so it imports only what builds that environment (the spec's
checks, the line file, the library): no rich, no numpy, nothing of the tuning (docs/deploy.md,
"Start-up cost"; tests/cli/test_run_lean.py guards it).

The interposer is one C library for recording and deploying, built by
:mod:`kernforge.record.interposer`; this module is the one place ``deploy`` imports it (a
deliberate exception to the layers, named in ``pyproject.toml`` and docs/architecture.md).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..record import interposer
from . import native as nd


def is_native_spec(path: str | Path) -> bool:
    """Whether the spec at ``path`` is a native one (deployed through the interposer)."""
    return nd.is_native_spec(Path(path))


def deploy_env(spec_path: Path, lines_path: Path, log_path: Path | None = None
               ) -> tuple[Path, dict[str, str]]:
    """The interposer library to preload (built on first use) and the variables that put it in
    deploy mode: the spec is checked (signature, image hashes), its launch lines written to
    ``lines_path``; with ``log_path``, the counts are written there when the program exits."""
    spec = nd.read_spec(spec_path)
    lines_path.write_text(nd.interposer_lines(spec))
    lib = interposer.build()
    env = {"KERNFORGE_DEPLOY": str(lines_path.resolve())}
    if log_path is not None:
        env["KERNFORGE_DEPLOY_LOG"] = str(log_path.resolve())
    return lib, env


def run_deployed(spec_path: Path, command: Sequence[str]) -> tuple[int, dict[str, Any]]:
    """Run ``command`` with the interposer replacing the spec's launches: its exit status and
    the interposer's counts (empty when no process of it reported any)."""
    with tempfile.TemporaryDirectory(prefix=f"kf-deploy-{os.getpid()}-") as tmp:
        log = Path(tmp) / "log.json"
        lib, extra = deploy_env(spec_path, Path(tmp) / "deploy.tsv", log)
        env = interposer.preload_env(lib, extra)
        env.pop("KERNFORGE_RECORD_DIR", None)
        status = interposer.run_preloaded(list(command), env)
        counts = nd.read_log(log)
    _sweep_orphans()  # after the program, off its start-up
    return status, counts


def _sweep_orphans() -> None:
    """Remove the line files of earlier runs whose launcher was killed (``kill -9`` leaves its
    ``kf-deploy-PID-*`` folder behind): those of a process that no longer exists."""
    try:
        names = os.listdir(tempfile.gettempdir())
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[:2] != ["kf", "deploy"] or not parts[2].isdigit():
            continue
        try:
            os.kill(int(parts[2]), 0)
            continue  # alive (or not ours to signal): left alone
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)


def env_lines(spec_path: Path) -> list[str]:
    """Shell lines that deploy the spec into any command started after them (job scripts),
    with the interposer's line file written beside the spec."""
    import shlex

    lib, extra = deploy_env(spec_path, spec_path.with_suffix(".interposer.tsv"))
    return [f"export LD_PRELOAD={shlex.quote(str(lib))}${{LD_PRELOAD:+:$LD_PRELOAD}}",
            f"export KERNFORGE_DEPLOY={shlex.quote(extra['KERNFORGE_DEPLOY'])}",
            "# optional: export KERNFORGE_DEPLOY_LOG=deploy-log.json  (counts, written at exit)"]
