"""Source rewrites that must understand the kernel, done on the tree-sitter syntax tree.

- ``__launch_bounds__(max_threads, min_blocks)`` on the entry point (replacing existing bounds);
- constant specialization: scalar parameter ``n`` becomes ``kf_rt_n`` and the body starts with
  ``const int n = 512;`` (the backend refuses a launch whose runtime value differs);
- block specialization: every ``blockDim.x|y|z`` becomes a compile-time constant.

Works for C and CUDA sources (same grammar family). Float constants are written as exact
hexadecimal literals so specialization never changes a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..core import ConfigError, KernelSource, Param, SignatureError
from .signature import _parser, _text, _walk

Edit = tuple[int, int, bytes]  # (start byte, end byte, replacement)
BLOCK_MACROS = ("KF_BLOCK_DIM_X", "KF_BLOCK_DIM_Y", "KF_BLOCK_DIM_Z")


def _entry_definition(root: Any, entry: str) -> Any:
    for n in _walk(root):
        if n.type != "function_definition":
            continue
        decl = next((c for c in n.children if c.type == "function_declarator"), None)
        ident = decl.child_by_field_name("declarator") if decl is not None else None
        if ident is not None and _text(ident) == entry:
            return n
    raise SignatureError(f"entry point {entry!r} has no definition in the source",
                         hint="the rewrite needs the kernel's body in the same source")


def literal(value: Any, dtype: str) -> str:
    """An exact C literal of ``value`` as type ``dtype``."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        v = float(dt.type(value))
        if not np.isfinite(v):
            raise ConfigError(f"cannot specialize a non-finite constant ({v})")
        text = v.hex()
        return f"{text}f" if dt.itemsize == 4 else (f"(__half){text}" if dt.itemsize == 2 else text)
    if dt.kind == "b":
        return "1" if value else "0"
    v = int(value)
    suffix = ("U" if dt.kind == "u" else "") + ("LL" if dt.itemsize == 8 else "")
    return f"{v}{suffix}"


def _launch_bounds_edit(fn: Any, bounds: tuple[int, int]) -> Edit:
    text = f"__launch_bounds__({int(bounds[0])}" + (f", {int(bounds[1])})" if bounds[1] else ")")
    existing = next((c for c in fn.children if c.type == "launch_bounds"), None)
    if existing is not None:
        return existing.start_byte, existing.end_byte, text.encode()
    decl = next(c for c in fn.children if c.type == "function_declarator")
    return decl.start_byte, decl.start_byte, (text + " ").encode()


def _constant_edits(fn: Any, constants: Mapping[str, Any], sig: Iterable[Param]) -> list[Edit]:
    params = {p.name: p for p in sig}
    decl = next(c for c in fn.children if c.type == "function_declarator")
    plist = decl.child_by_field_name("parameters")
    body = fn.child_by_field_name("body")
    edits: list[Edit] = []
    prologue = []
    for name, value in constants.items():
        p = params.get(name)
        if p is None or p.pointer:
            raise ConfigError(f"cannot specialize {name!r}: not a scalar parameter",
                              hint="choose scalar parameters: " + ", ".join(
                                  q.name for q in params.values() if not q.pointer))
        node = next(c for c in plist.named_children if c.type == "parameter_declaration"
                    and (ident := c.child_by_field_name("declarator")) is not None
                    and _text(ident) == name)
        ident = node.child_by_field_name("declarator")
        edits.append((ident.start_byte, ident.end_byte, f"kf_rt_{name}".encode()))
        base = _text(node.child_by_field_name("type"))
        prologue.append(f"const {base} {name} = {literal(value, p.dtype)}; (void)kf_rt_{name};")
    if prologue:
        at = body.start_byte + 1  # just after "{"
        edits.append((at, at, ("\n    " + "\n    ".join(prologue) + "\n").encode()))
    return edits


def _block_edits(root: Any) -> list[Edit]:
    edits = []
    for n in _walk(root):
        if n.type == "field_expression":
            arg, field = n.child_by_field_name("argument"), n.child_by_field_name("field")
            if arg is not None and field is not None and _text(arg) == "blockDim" \
                    and _text(field) in ("x", "y", "z"):
                macro = BLOCK_MACROS["xyz".index(_text(field))]
                edits.append((n.start_byte, n.end_byte, macro.encode()))
    return edits


def rewrite(source: KernelSource, signature: Iterable[Param], *,
            launch_bounds: tuple[int, int] | None = None,
            constants: Mapping[str, Any] | None = None,
            block: tuple[int, int, int] | None = None) -> str:
    """The source with the requested rewrites applied (unchanged when none is requested)."""
    if not launch_bounds and not constants and not block:
        return source.code
    code = source.code.encode()
    root = _parser(source.language).parse(code).root_node
    fn = _entry_definition(root, source.entry)
    edits: list[Edit] = []
    if launch_bounds:
        edits.append(_launch_bounds_edit(fn, launch_bounds))
    if constants:
        edits.extend(_constant_edits(fn, constants, signature))
    header = b""
    if block:
        edits.extend(_block_edits(root))
        header = "".join(f"#define {m} {int(v)}\n" for m, v in zip(BLOCK_MACROS, block)).encode()
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        code = code[:start] + new + code[end:]
    return (header + code).decode()
