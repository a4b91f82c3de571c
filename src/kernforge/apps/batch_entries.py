"""The manifests of a batch (``kernforge app batch``): those of a directory, each read with
its hash and its program's name, or why it does not load."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..core import ConfigError
from .draft import plain_name
from .manifest import AppManifestError, load_manifest


@dataclass(frozen=True)
class Entry:
    """One manifest of the batch: its program's name, or why it does not load."""
    name: str
    path: Path
    sha: str
    error: str = ""


def manifests_in(directory: Path) -> list[Path]:
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--dir {directory}: a file, not a directory",
                          hint=f"give a manifest without --dir: kernforge app batch {directory}")
    if not directory.is_dir():
        raise ConfigError(f"--dir {directory}: no such directory",
                          hint="give the directory of the manifests (kernforge app draft --out)")
    found = sorted(p for p in directory.glob("*.toml") if not p.name.startswith("."))
    if not found:
        raise ConfigError(f"--dir {directory}: no manifest (*.toml) in it",
                          hint="draft them with kernforge app draft SUITE_DIR --out "
                               f"{directory}")
    return found


def entries(paths: list[Path]) -> list[Entry]:
    """Every manifest read; two with one name are an error (their runs would collide)."""
    out: list[Entry] = []
    for p in paths:
        try:
            sha = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError as exc:
            raise ConfigError(f"cannot read the manifest {p}: {exc.strerror or exc}",
                              hint=f"a directory of manifests goes after --dir: kernforge app "
                                   f"batch --dir {p}" if p.is_dir() else
                              "give the paths of the applications' .toml manifests") from None
        try:
            out.append(Entry(load_manifest(p).name, p.resolve(), sha))
        except AppManifestError as exc:
            why = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
            out.append(Entry(plain_name(p.stem), p.resolve(), sha, why))
    seen: dict[str, Path] = {}
    for e in out:
        if e.name in seen:
            raise ConfigError(f"two manifests name the program {e.name!r}: {seen[e.name]} and "
                              f"{e.path}", hint="give each program its own name = \"...\"")
        seen[e.name] = e.path
    return out
