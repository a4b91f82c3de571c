"""Where kernforge keeps its caches: ``$KERNFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernforge``,
else ``~/.cache/kernforge``; and the user's own data (e.g. an adopted dispatch table):
``$KERNFORGE_DATA_DIR``, else ``$XDG_DATA_HOME/kernforge``, else ``~/.local/share/kernforge``.
Nothing kernforge runs writes into its installed package."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError


def cache_root() -> Path:
    root = os.environ.get("KERNFORGE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kernforge"


def cache_path(name: str) -> Path:
    """``name`` (a folder or a file) under the cache root."""
    return cache_root() / name


def cache_folder(name: str) -> Path:
    """The folder ``name`` under the cache root, created and writable; a :class:`ConfigError`
    naming the variable that chose the root when it cannot be made so."""
    path = cache_path(name)
    try:
        path.mkdir(parents=True, exist_ok=True)
        usable = os.access(path, os.W_OK | os.X_OK)
        why = "it is not writable"
    except OSError as exc:
        usable, why = False, exc.strerror or str(exc)
    if usable:
        return path
    if os.environ.get("KERNFORGE_CACHE_DIR"):
        source = f"KERNFORGE_CACHE_DIR={os.environ['KERNFORGE_CACHE_DIR']!r}"
    elif os.environ.get("XDG_CACHE_HOME"):
        source = f"XDG_CACHE_HOME={os.environ['XDG_CACHE_HOME']!r}"
    else:
        source = "the home directory"
    raise ConfigError(f"kernforge's cache folder {path} cannot be used ({why}); "
                      f"the cache root comes from {source}",
                      hint="set KERNFORGE_CACHE_DIR to a writable directory "
                           "(it is created if missing), or unset it for ~/.cache/kernforge")


def data_root() -> Path:
    root = os.environ.get("KERNFORGE_DATA_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "kernforge"


def data_path(name: str) -> Path:
    """``name`` (a folder or a file) under the user's data root."""
    return data_root() / name


def package_root() -> Path:
    """The installed kernforge package (read-only to kernforge itself)."""
    return Path(__file__).resolve().parents[1]


def inside_package(path: Path) -> bool:
    """Whether ``path`` lies in the installed package (links and ``..`` resolved)."""
    try:
        Path(path).resolve().relative_to(package_root())
    except ValueError:
        return False
    return True
