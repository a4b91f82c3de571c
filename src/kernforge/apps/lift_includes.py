"""A CUDA file as the compiler sees it, for lifting and for finding its kernels.

:func:`translation_unit` inlines the file's local headers (``#include "x.h"`` found beside the
file or in an ``-I`` directory, each once) so a kernel or an indexing macro kept in a header is
seen; system headers (``<...>``, or quoted ones found nowhere) are left out, as the lifter knows
none of their contents. :func:`kernels_defined` names the ``__global__`` functions a text
defines; :func:`native_text` gives a unit's bound source with its headers and ``-D`` defines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import syntax
from ..core.native import NativeSource

_ANY_INCLUDE = re.compile(r"^\s*#\s*include\b.*$", re.MULTILINE)


def translation_unit(path: Path, includes: Sequence[Path] = ()) -> str:
    """The text of ``path`` with its local headers inlined (recursively, each once)."""
    seen: set[Path] = set()

    def expand(p: Path) -> str:
        seen.add(p.resolve())
        text = p.read_text("utf-8", errors="replace")

        def one(m: re.Match[str]) -> str:
            inc = re.match(r'\s*#\s*include\s*"([^"]+)"', m.group(0))
            if inc is None:
                return ""
            for d in (p.parent, *includes):
                h = (Path(d) / inc.group(1)).resolve()
                if h.is_file():
                    return "" if h in seen else expand(h)
            return ""

        return _ANY_INCLUDE.sub(one, text)

    return expand(Path(path))


def top_level(root: Any) -> list[Any]:
    """The declarations of a translation unit, inside ``extern "C" {...}``, namespaces and
    templates too."""
    out = []
    for node in root.children:
        if node.type in ("linkage_specification", "namespace_definition", "declaration_list",
                         "template_declaration"):
            out.extend(top_level(node))
        else:
            out.append(node)
    return out


def function_name(fn: Any) -> str | None:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    if d is None:
        return None
    n = d.child_by_field_name("declarator")
    return syntax.text(n) if n is not None else None


def kernels_defined(code: str) -> list[str]:
    """The names of the ``__global__`` functions ``code`` defines, in order."""
    _data, root = syntax.parse(code, "cuda")
    out = []
    for node in top_level(root):
        if node.type == "function_definition" and \
                "__global__" in syntax.text(node).split("(")[0]:
            name = function_name(node)
            if name and name not in out:
                out.append(name)
    return out


def kernel_name(name: str) -> str:
    """The function's name in a readable kernel name (``void ns::f<float>(float*)`` -> f)."""
    head = re.split(r"[(<]", name, maxsplit=1)[0].strip().split()
    return head[-1].split("::")[-1] if head else name


_PRECISIONS = {"float": "fp32", "double": "fp64", "half": "fp16", "__half": "fp16"}


def template_precision(name: str) -> str | None:
    """The element type a recorded template instantiation names
    (``void f<float, 4>(float const*)`` -> fp32); None where its name has no such argument."""
    m = re.match(r"[^(<]*<([^>]*)>", name)
    if m is None:
        return None
    for arg in m.group(1).split(","):
        if arg.strip() in _PRECISIONS:
            return _PRECISIONS[arg.strip()]
    return None


def native_text(src: NativeSource) -> tuple[str, tuple[str, ...]]:
    """A unit's source as lifting reads it: an nvcc file bound from disk with its local
    headers inlined (while the file is there), and the ``-D`` defines of its options."""
    defines = tuple(o[2:] for o in src.options if o.startswith("-D") and len(o) > 2)
    includes = [Path(o[2:]) for o in src.options if o.startswith("-I") and len(o) > 2]
    path = Path(src.program) if src.origin == "nvcc" and src.program else None
    if path is not None and path.is_file() and \
            path.read_text("utf-8", errors="replace") == src.code:
        return translation_unit(path, includes), defines
    return src.code, defines
