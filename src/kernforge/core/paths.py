"""Where kernforge keeps its caches: ``$KERNFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernforge``,
else ``~/.cache/kernforge``; and the user's own data (e.g. an adopted dispatch table):
``$KERNFORGE_DATA_DIR``, else ``$XDG_DATA_HOME/kernforge``, else ``~/.local/share/kernforge``.
Nothing kernforge runs writes into its installed package."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    root = os.environ.get("KERNFORGE_CACHE_DIR")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kernforge"


def cache_path(name: str) -> Path:
    """``name`` (a folder or a file) under the cache root."""
    return cache_root() / name


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
