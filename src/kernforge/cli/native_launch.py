"""``kernforge run --deploy NATIVE_SPEC -- COMMAND`` and ``--print-env``: any program, with the
interposer replacing the spec's launches (:mod:`kernforge.deploy.interposed` does it; this
module prints). The program starts after this module has run, so it imports nothing more
(docs/deploy.md, "Start-up cost"; tests/cli/test_run_lean.py guards it): a spec verified before
is started through :func:`quick`, without the command line parser.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable, Sequence
    from pathlib import Path
    from typing import Any


def quick(words: Sequence[str]) -> Callable[[], int] | None:
    """The launch of ``run`` ``words`` when they are ``--deploy SPEC`` (or ``--deploy=SPEC``),
    optionally ``-q``, then ``-- COMMAND``, and SPEC is a native spec verified before and
    unchanged since; else None (the command line parser takes them, as always)."""
    spec: str | None = None
    command: list[str] | None = None
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            command = list(words[i + 1:])
            break
        if word in ("-q", "--quiet"):
            i += 1
        elif word == "--deploy" and i + 1 < len(words) and not words[i + 1].startswith("-"):
            spec, i = words[i + 1], i + 2
        elif word.startswith("--deploy=") and len(word) > len("--deploy="):
            spec, i = word[len("--deploy="):], i + 1
        else:
            return None  # anything else: the parser says what it means
    if spec is None or not command:
        return None
    from ..deploy import linecache  # os and time: what a Python spec's launch may import

    kept = linecache.lookup(spec)
    if kept is None:
        return None
    found, program = spec, command
    return lambda: _deploy_kept(found, kept, program)


def deploy(spec_path: str | os.PathLike[str], command: Sequence[str]) -> int:
    """Run ``command`` with the interposer replacing the spec's launches; print its counts."""
    from ..deploy import interposed

    status, counts = interposed.run_deployed(spec_path, command)
    _report(spec_path, status, counts)
    return status


def _deploy_kept(spec_path: str, kept: tuple[str, str], command: Sequence[str]) -> int:
    """:func:`deploy` of a spec verified before: the kept library and line file."""
    from ..deploy import preload_run

    status, counts = preload_run.run(lambda _folder: kept, command)
    _report(spec_path, status, counts)
    return status


def _report(spec_path: str | os.PathLike[str], status: int, counts: dict[str, Any]) -> None:
    """The interposer's counts on stderr, as they are (no markup, no wrapping)."""
    replaced = sum(e.get("replaced", 0) for e in counts.get("entries", []))
    lines = [(f"kernforge deploy report ({os.fspath(spec_path)}): {replaced} launch(es) ran "
              f"a tuned configuration; {counts.get('fallbacks', 0)} launch(es) of a deployed "
              "kernel ran unchanged (another problem, or its entry was disabled)")]
    for e in counts.get("entries", []):
        lines.append(f"  {e['name']}: {e['replaced']} replaced"
                     + (f", {e['load_failures']} load failure(s)"
                        if e.get("load_failures") else "")
                     + (", the tuned launch failed: the original ran instead"
                        if e.get("launch_failures") else "") + _fusion(e))
    if not counts:  # each process that used the driver writes them when it exits normally
        lines.append(f"  (no counts: the program exited with status {status}; no process of it "
                     "reported any: none used the CUDA driver, or the one that did was killed "
                     "or ended through _exit)")
    try:
        sys.stderr.write("".join(f"{line}\n" for line in lines))
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # closed or gone: the status still counts
        pass


def _fusion(e: dict[str, Any]) -> str:
    """What a fused entry's counts add (its fused launches, the held launches it ran one by
    one and how many of them its one-launch line ran), or that the entry is that line."""
    if e.get("one_launch"):
        return " (the one-launch line of the fused entry above; its held launches included)"
    if not e.get("fuse"):
        return ""
    one = e.get("flushed_one_launch") or 0
    return (f"; fused {e['fuse']} steps: {e.get('fused_groups', 0)} fused launch(es), "
            f"{e.get('flushed_unfused', 0)} held launch(es) run unfused"
            + (f" ({one} by its one-launch line)" if one else ""))


def print_env(spec_path: Path) -> int:
    """Shell lines that deploy the spec into any command started after them (job scripts),
    with the interposer's line file written beside the spec."""
    from ..deploy import interposed

    for line in interposed.env_lines(spec_path):
        print(line)
    return 0
