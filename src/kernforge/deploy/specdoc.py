"""A deployment spec's document: the checks of the whole file, without the entries' model.

:func:`load_document` reads a spec and checks everything that says whether the file is the
one ``kernforge export`` wrote (it exists, is JSON, has the format, a readable
``schema_version``, the checksum over its canonical JSON, an ``entries`` list whose items have
every required key). :func:`~.spec.read_spec` builds the entries from it; the activation by
``$KERNFORGE_DEPLOY`` (:mod:`.startup`) checks a spec at start-up with it alone and builds the
entries when a kernel of the spec first launches. It imports nothing but the standard library
and :mod:`kernforge.core.jsonio`, which ``import kernforge`` has loaded already.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._version import __version__
from ..core.errors import ConfigError
from ..core.jsonio import DamagedJSON, canonical_checksum, parse_json

FORMAT = "kernforge-deploy"
NATIVE_FORMAT = "kernforge-native-deploy"  # deploy/native.py: deployed through the interposer
SCHEMA_VERSION = 1
READABLE_VERSIONS = (1,)
ENTRY_KEYS = ("kernel", "device", "problem", "variant", "evidence")
REEXPORT = "export the spec again (kernforge export RUN_DIR -o SPEC)"

PathLike = str | os.PathLike


class DeploySpecError(ConfigError):
    """A deployment spec on disk is missing, truncated, edited, or of an unknown version."""


def bad(path: Path, problem: str, hint: str = REEXPORT) -> DeploySpecError:
    return DeploySpecError(f"{path}: {problem}", hint=hint)


#: the first words of the interposer's line file (deploy/native.py), which a native deployment
#: names in $KERNFORGE_DEPLOY too: the interposer deploys it, not ``import kernforge``
LINES_MARK = "# written by kernforge from "


def is_interposer_lines(path: Path) -> bool:
    """Whether the file at ``path`` is the interposer's line file of a native deployment."""
    try:
        with open(path, "rb") as f:
            return f.read(len(LINES_MARK)) == LINES_MARK.encode()
    except OSError:
        return False


def is_native_spec(path: Path) -> bool:
    """Whether the file at ``path`` is a native spec (:mod:`.native`), by its first bytes,
    without reading the rest (the launcher asks before it imports anything of either kind)."""
    try:
        with open(path, "rb") as f:
            head = f.read(400).decode("utf-8", errors="replace")
    except OSError:
        return False
    return NATIVE_FORMAT in head


def _load_json(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise bad(path, "is a directory, not a deployment spec",
                  "give the file written by kernforge export (e.g. RUN_DIR/deploy.json, or "
                  "run kernforge export on this directory if it is a tuning run)")
    if not path.is_file():
        raise bad(path, "is not a regular file (a device, a pipe, ...), not a deployment spec"
                  if path.exists() else "no such deployment spec",
                  "give the file written by kernforge export (e.g. RUN_DIR/deploy.json)")
    text = path.read_text("utf-8", errors="replace")
    try:
        doc = parse_json(text)
    except DamagedJSON as exc:
        raise bad(path, str(exc)) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise bad(path, f"not a kernforge deployment spec (format is {found!r}, expected "
                  f"{FORMAT!r})", "give the file written by kernforge export")
    return doc


def load_document(path: Path) -> dict[str, Any]:
    """The spec's JSON document, checked as a whole (see the module docstring); raises
    :class:`DeploySpecError` naming the file, the problem and what to do."""
    doc = _load_json(path)
    if doc.get("schema_version") not in READABLE_VERSIONS:
        raise bad(path, f"unknown schema_version {doc.get('schema_version')!r}; this "
                  f"kernforge ({__version__}) reads versions "
                  f"{', '.join(map(str, READABLE_VERSIONS))}",
                  "upgrade kernforge (pip install -U kernforge) to read this spec")
    if "checksum" not in doc:
        raise bad(path, "has no checksum field")
    if doc["checksum"] != canonical_checksum({k: v for k, v in doc.items() if k != "checksum"}):
        raise bad(path, "checksum mismatch: the spec was modified after it was exported",
                  f"do not edit a spec by hand; {REEXPORT}")
    raw = doc.get("entries")
    if not isinstance(raw, list):
        raise bad(path, "has no entries list")
    for i, e in enumerate(raw):
        missing = [k for k in ENTRY_KEYS if not isinstance(e, dict) or k not in e]
        if missing:
            raise bad(path, f"entries[{i}] lacks required key(s) {', '.join(missing)}")
    return doc


# ---- the lookup key: which kernel an entry is for, which kernel a launch is of ---------------
NOT_IN_SPEC = "not in the spec"  # the fallback category of a kernel without entries


def no_entry(spec_name: str) -> str:
    """The detail of a ``not in the spec`` fallback."""
    return f"no entry for this kernel in {spec_name}"


def label_of(source: Any, options: Any) -> str:
    """How the report names a kernel (``source``: its ``KernelSource``, ``options``: its
    ``CompileOptions``): its name expression, else its entry point."""
    return str(options.get("name_expression") or "") or source.entry


def code_sha256(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def lookup_key(backend: str, language: str, entry: str, sha: str,
               options: Mapping[str, Any]) -> tuple[str, str, str, str, str | None]:
    """A launch's key (``options``: its compile options) or an entry's (``options``:
    ``{"name_expression": ...}`` of its kernel): backend, language, entry point, sha256 of
    the code, name expression ('' or absent: None)."""
    expr = str(options.get("name_expression") or "") or None
    return (backend, language, entry, sha, expr)


def entry_lookup(kernel: Mapping[str, Any]) -> tuple[str, str, str, str, str | None]:
    """The lookup key of an entry's ``kernel`` object, as :meth:`KernelKey.lookup` gives it
    for the entry read by :func:`~.spec.entry_from_json` (KeyError when a key is missing)."""
    return (str(kernel["backend"]), str(kernel["language"]), str(kernel["entry"]),
            str(kernel["code_sha256"]), kernel["name_expression"] or None)
