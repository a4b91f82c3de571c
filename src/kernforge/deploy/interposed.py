"""A native deployment spec deployed into an unchanged program: the driver interposer
preloaded in deploy mode, the spec's launch lines beside it.

Every command that puts a native spec into a program (``kernforge run --deploy``,
``--print-env``, the application workflow's M4) builds its environment here: the spec's
signature and image hashes checked, its line file written, the library built on first use.
``kernforge run --deploy`` keeps what a first start verified (:mod:`.linecache`), so that a
later start of the unchanged spec neither hashes nor writes, and starts the program through
:mod:`.preload_run`. The program starts after this module has run, so it imports only what
builds that environment: no rich, no numpy, nothing of the tuning, and what only a first
verification needs where it is used (docs/deploy.md, "Start-up cost";
tests/cli/test_run_lean.py and tests/cli/test_native_quick_start.py guard it).

The interposer is one C library for recording and deploying, built by
:mod:`kernforge.record.interposer`; this module is the one place ``deploy`` imports it (a
deliberate exception to the layers, named in ``pyproject.toml`` and docs/architecture.md).
"""

from __future__ import annotations

import os
import time

from . import linecache, preload_run

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any


def is_native_spec(path: str | Path) -> bool:
    """Whether the spec at ``path`` is a native one (deployed through the interposer)."""
    from pathlib import Path

    from . import native as nd

    return nd.is_native_spec(Path(path))


def deploy_env(spec_path: Path, lines_path: Path, log_path: Path | None = None
               ) -> tuple[Path, dict[str, str]]:
    """The interposer library to preload (built on first use) and the variables that put it in
    deploy mode: the spec is checked (signature, image hashes), its launch lines written to
    ``lines_path``; with ``log_path``, the counts are written there when the program exits."""
    from ..record import interposer
    from . import native as nd

    spec = nd.read_spec(spec_path)
    lines_path.write_text(nd.interposer_lines(spec))
    lib = interposer.build()
    env = {"KERNFORGE_DEPLOY": str(lines_path.resolve())}
    if log_path is not None:
        env["KERNFORGE_DEPLOY_LOG"] = str(log_path.resolve())
    return lib, env


def cached(spec_path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """(the interposer library, the line file) of a native spec verified before and unchanged
    since (:mod:`.linecache`), else None: nothing to hash, nothing to write."""
    return linecache.lookup(os.fspath(spec_path))


def prepared(spec_path: str | os.PathLike[str], spare: str) -> tuple[str, str]:
    """(the interposer library, the line file) of the spec: kept from an earlier start when
    nothing of it changed, else verified now (signature, image hashes: a damaged or edited
    spec is a ConfigError) and kept. ``spare``: a private folder for the line file when the
    cache folder cannot hold it."""
    hit = cached(spec_path)
    if hit is not None:
        return hit
    from pathlib import Path

    from ..backends import jit
    from ..record import interposer
    from . import native as nd
    from . import native_fuse_check, native_guards, native_unfused, specdoc
    from .native_unfused import parts

    spec_abs = os.path.abspath(spec_path)
    started = time.time_ns()
    spec = nd.read_spec(Path(spec_abs))
    text = nd.interposer_lines(spec)
    lib = str(interposer.build())
    images = [str(p) for e in spec.entries for part in parts(e)
              for p in (spec.image_path(part), spec.image_path(part).resolve())]
    native = Path(interposer.__file__).with_name("native")
    # what the library and the line file are made by (native.py writes the lines with its
    # helper modules): another kernforge is verified again
    sources = [interposer.__file__, nd.__file__, jit.__file__, __file__, linecache.__file__,
               native_fuse_check.__file__, native_guards.__file__, native_unfused.__file__,
               specdoc.__file__,
               *(str(native / n) for n in interposer.SOURCES)]
    try:
        kept = linecache.remember(spec_abs, text, lib, images, sources, str(native), started)
    except OSError:  # no usable cache folder: verified again at the next start
        kept = None
    if kept is not None:
        return lib, kept
    lines = os.path.join(spare, "deploy.tsv")  # this start's own
    with open(lines, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text)
    return lib, lines


def run_deployed(spec_path: str | os.PathLike[str], command: Sequence[str]
                 ) -> tuple[int, dict[str, Any]]:
    """Run ``command`` with the interposer replacing the spec's launches: its exit status
    (128+N for signal N) and the interposer's counts (empty when no process of it reported
    any). The program starts as a child of this process, which waits for it."""
    return preload_run.run(lambda folder: prepared(spec_path, folder), command)


def env_lines(spec_path: Path) -> list[str]:
    """Shell lines that deploy the spec into any command started after them (job scripts),
    with the interposer's line file written beside the spec."""
    import shlex

    lib, extra = deploy_env(spec_path, spec_path.with_suffix(".interposer.tsv"))
    return [f"export LD_PRELOAD={shlex.quote(str(lib))}${{LD_PRELOAD:+:$LD_PRELOAD}}",
            f"export KERNFORGE_DEPLOY={shlex.quote(extra['KERNFORGE_DEPLOY'])}",
            "# optional: export KERNFORGE_DEPLOY_LOG=deploy-log.json  (counts, written at exit)"]
