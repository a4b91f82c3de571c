"""Where kernforge keeps its caches: ``$KERNFORGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernforge``,
else ``~/.cache/kernforge``."""

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
