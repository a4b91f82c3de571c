"""The environment that deploys a native spec into an unchanged program.

Deploying lives above both ``deploy`` (the spec and the interposer's launch lines) and
``record`` (the interposer library), which the layers keep apart; every command that puts a
native spec into a program (``kernforge run --deploy``, ``--print-env``, the application
workflow's M4) builds its environment here.
"""

from __future__ import annotations

from pathlib import Path

from ..deploy import native as nd
from ..record import interposer


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
