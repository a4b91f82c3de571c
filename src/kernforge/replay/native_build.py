"""Moved: image builds are the cuda backend's (:mod:`kernforge.backends.image_build`). Kept
only while :mod:`kernforge.apps.source_binding` imports :func:`bind_source` from here."""

from __future__ import annotations

from ..backends.image_build import bind_source

__all__ = ["bind_source"]
