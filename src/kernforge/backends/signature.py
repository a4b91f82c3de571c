"""Find a kernel's entry point and read its parameters with a real parser (tree-sitter).

Works for C and CUDA C++ sources. Typedefs and object-like ``#define``s of type names declared
in the source are resolved; anything else unknown is a :class:`SignatureError` that says how to
pass the signature explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core import KernelSource, Param, SignatureError
from ..syntax import parser as _parser
from ..syntax import text as _text
from ..syntax import walk as _walk

C_TYPES: dict[str, str] = {
    "char": "int8", "signed char": "int8", "unsigned char": "uint8", "int8_t": "int8",
    "uint8_t": "uint8", "short": "int16", "short int": "int16", "unsigned short": "uint16",
    "int16_t": "int16", "uint16_t": "uint16", "int": "int32", "signed": "int32",
    "signed int": "int32", "unsigned": "uint32", "unsigned int": "uint32", "int32_t": "int32",
    "uint32_t": "uint32", "long": "int64", "long int": "int64", "long long": "int64",
    "long long int": "int64", "unsigned long": "uint64", "unsigned long long": "uint64",
    "int64_t": "int64", "uint64_t": "uint64", "size_t": "uint64", "ptrdiff_t": "int64",
    "ssize_t": "int64", "float": "float32", "double": "float64", "_Bool": "bool",
    "bool": "bool", "__half": "float16", "half": "float16", "_Float16": "float16",
    "void": "void",
}
QUALIFIERS = {"const", "volatile", "restrict", "__restrict__", "__restrict", "static", "extern",
              "__global__", "__device__", "inline", "__inline__", "__forceinline__"}


def _aliases(root: Any) -> dict[str, str]:
    """typedef T NAME; and #define NAME T for names of known scalar types."""
    out: dict[str, str] = {}
    for n in _walk(root):
        if n.type == "type_definition":
            decl = n.child_by_field_name("declarator")
            typ = n.child_by_field_name("type")
            if decl is not None and typ is not None and decl.type == "type_identifier":
                out[_text(decl)] = _text(typ)
        elif n.type == "preproc_def":
            name, value = n.child_by_field_name("name"), n.child_by_field_name("value")
            if name is not None and value is not None:
                out[_text(name)] = _text(value).strip()
    return out


def _resolve(base: str, aliases: dict[str, str]) -> str | None:
    seen = set()
    while base not in C_TYPES and base in aliases and base not in seen:
        seen.add(base)
        base = " ".join(w for w in aliases[base].split() if w not in QUALIFIERS)
    return C_TYPES.get(base)


def _param(node: Any, aliases: dict[str, str], entry: str) -> Param:
    text = " ".join(_text(node).replace("*", " * ").split())
    decl = node.child_by_field_name("declarator")
    pointer = 0
    while decl is not None and decl.type in ("pointer_declarator", "abstract_pointer_declarator",
                                             "array_declarator", "reference_declarator"):
        pointer += 1
        decl = decl.child_by_field_name("declarator") or next(
            (c for c in decl.named_children if c.type == "identifier"), None)
    if decl is None or decl.type != "identifier":
        raise SignatureError(f"cannot read parameter {text!r} of {entry}",
                             hint="name every parameter, or pass signature=... explicitly")
    name = _text(decl)
    typ = node.child_by_field_name("type")
    base = " ".join(w for w in _text(typ).split() if w not in QUALIFIERS) if typ else ""
    const = "const" in _text(node).split("*")[0].split() if pointer else False
    dtype = _resolve(base, aliases)
    if dtype is None:
        raise SignatureError(f"parameter {name!r} of {entry} has type {base!r}, which kernforge "
                             f"cannot map to a numpy dtype",
                             hint="use a standard C scalar type, or pass signature=... explicitly")
    if pointer > 1:
        raise SignatureError(f"parameter {name!r} of {entry} is a pointer to pointer",
                             hint="pass flat arrays; kernforge records single-level pointers")
    ctype = text[: text.rfind(name)].strip() if name in text else text
    return Param(name=name, ctype=ctype, dtype=dtype, pointer=bool(pointer), const=const)


def entry_declarator(root: Any, entry: str) -> Any | None:
    """The first ``function_declarator`` of ``entry`` that has a parameter list, or None."""
    for n in _walk(root):
        if n.type != "function_declarator":
            continue
        ident = n.child_by_field_name("declarator")
        if ident is not None and _text(ident) == entry \
                and n.child_by_field_name("parameters") is not None:
            return n
    return None


def parse_signature(source: KernelSource, *,
                    substitutions: Mapping[str, str] | None = None) -> tuple[Param, ...]:
    """The parameters of ``source.entry``, in order.

    ``substitutions`` maps type names to C types before resolution (template type parameters,
    e.g. ``{"T": "float"}``); they take precedence over typedefs and ``#define``s.
    """
    root = _parser(source.language).parse(source.code.encode()).root_node
    aliases = {**_aliases(root), **(substitutions or {})}
    decl = entry_declarator(root, source.entry)
    if decl is None:
        raise SignatureError(
            f"entry point {source.entry!r} not found in the {source.language} source",
            hint="check the spelling of the entry name, and that the function is defined in "
                 "this source")
    params = decl.child_by_field_name("parameters")
    nodes = [c for c in params.named_children if c.type == "parameter_declaration"]
    if len(nodes) == 1 and _text(nodes[0]).strip() == "void":
        return ()
    return tuple(_param(c, aliases, source.entry) for c in nodes)
