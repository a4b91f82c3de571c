"""Input checks every command shares, made before any work starts: numeric ranges, output
paths that can be written, ``#define`` names the source uses, recorded units that load.

Each failure is a :class:`ConfigError` (exit 2) whose hint says what to do."""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rich.markup import escape

from ..core import ConfigError, RecordingError
from ..core.model import MAX_THREADS
from ..pipeline.units import Units, load_units
from . import damaged as damaged_units
from .output import err_console, notes


def int_range(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``lo..hi`` (argparse exits 2 with the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < lo or (hi is not None and value > hi):
            bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"{value} is out of range: give an integer {bound}")
        return value

    parse.__name__ = "int"  # argparse names the type in "invalid int value"
    return parse


def float_range(lo: float, hi: float | None = None) -> Callable[[str], float]:
    """An argparse ``type``: a finite number in ``lo..hi``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < lo or (hi is not None and value > hi):
            bound = f"between {lo:g} and {hi:g}" if hi is not None else f"at least {lo:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: give a number {bound}")
        return value

    parse.__name__ = "float"
    return parse


THREADS = int_range(1, MAX_THREADS)
POSITIVE = int_range(1)
NON_NEGATIVE = int_range(0)


def _probe_dir(directory: Path, what: str) -> None:
    """``directory`` (or its nearest existing parent) accepts a new file."""
    probe = directory
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise ConfigError(f"{what}: {probe} is a file, not a directory",
                          hint="choose another path")
    try:  # a real file, not os.access: root passes that, a read-only file system does not
        fd, tmp = tempfile.mkstemp(dir=probe, prefix=".kernforge-probe-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(f"{what}: cannot write into {probe} ({exc.strerror})",
                          hint="choose a path you can write, e.g. under your home "
                               "directory") from None


def writable_file(path: Path | str | None, what: str) -> None:
    """Raise unless ``path`` can be (over)written; checked before the work, not after it."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{what}: {p} is a directory", hint="give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise ConfigError(f"{what}: {p} is not writable (permission denied)",
                          hint="choose another file, or fix its permissions")
    _probe_dir(p.parent if str(p.parent) else Path("."), what)


def writable_dir(path: Path | str | None, what: str) -> None:
    """Raise unless ``path`` is, or can be created as, a writable directory."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{what}: {p} exists and is not a directory",
                          hint="choose a directory path")
    _probe_dir(p, what)


def not_recordings(out: Path | str, what: str) -> None:
    """Refuse a run directory that is a recordings directory or a recorded unit: the run's
    files (``<out>/<unit>/result.json``, ``study.db``, ...) would be written into the units."""
    p = Path(out)
    if not p.is_dir():
        return
    units = [p] if (p / "manifest.json").is_file() else [
        c for c in p.iterdir() if (c / "manifest.json").is_file()]
    if units:
        raise ConfigError(f"{what}: {p} holds recorded units ({units[0].name}, ...): the run's "
                          f"files would be written into them",
                          hint="give the run its own directory, e.g. --out runs/NAME")


def resumable_dir(out: Path | str | None, resume: bool) -> None:
    """With ``--resume``, ``--out`` must name a run that exists: a mistyped or never-created
    directory would otherwise silently start a fresh run there."""
    if not resume:
        return
    if out is None:
        raise ConfigError("--resume needs --out naming the run directory to continue")
    if not Path(out).exists():
        raise ConfigError(f"--resume: {out} does not exist, so there is no run to resume "
                          "there",
                          hint="check the --out path of the run to continue, or drop --resume "
                               "to start a new run")


def unused_defines(code: str, defines: Iterable[str]) -> list[str]:
    """The names among ``defines`` that ``code`` never mentions (a typo, or a macro of
    another kernel): defining them cannot change the kernel."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    return [name for name in defines if name not in words]


def check_defines(unit: str, code: str, defines: Mapping[str, str], *, allow: bool) -> None:
    """A ``--define`` the unit's source never references is an error (a warning with
    ``allow``): the replay would measure the unchanged kernel."""
    unused = unused_defines(code, defines)
    if not unused:
        return
    names = ", ".join(unused)
    if allow:
        err_console.print(f"[yellow]warning:[/] {escape(unit)}: the source never "
                          f"references {escape(names)}; the define changes nothing",
                          soft_wrap=True)
        return
    raise ConfigError(f"{unit}: --define {names}: the kernel's source never references "
                      f"{'this name' if len(unused) == 1 else 'these names'}, so the replay "
                      f"would measure the unchanged kernel",
                      hint="check the spelling (kernforge inspect shows the recorded "
                           "defines), or pass --allow-unused-define")


def warn_damaged(exc: RecordingError) -> None:
    damaged_units.skip(exc)


def load_all_units(path: str | Path, pattern: str | None = None) -> Units:
    """Every recorded unit under ``path`` (:func:`kernforge.pipeline.units.load_units`), what
    it skips and warns of printed."""
    return load_units(path, pattern, notes())
