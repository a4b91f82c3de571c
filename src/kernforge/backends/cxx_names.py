"""C++ names of CUDA kernels: name expressions, template instantiations, simple demangling.

A *name expression* (NVRTC's term, CuPy's ``name_expressions``) such as ``ns::reduce<float, 256>``
names one instantiation of a template kernel. kernforge keeps ``KernelSource.entry`` an
identifier -- the base name, ``reduce`` -- and carries the whole expression in the cuda
backend's ``name_expression`` knob, so a replay compiles exactly the same instantiation.

The parameter dtypes of an instantiation come from the kernel's template parameter list,
read with tree-sitter, with each type parameter replaced by its argument from the expression
(or its default): ``template <typename T, int B> __global__ void reduce(const T* x, ...)``
with ``reduce<float, 256>`` gives ``x: const float *``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..core import KernelSource, Param, SignatureError
from .signature import _parser, _text, entry_declarator, parse_signature

_HINT = "write a name expression such as scale<float> or ns::reduce<double, 256>"
_SCOPES = ("translation_unit", "declaration_list", "linkage_specification")


@dataclass(frozen=True)
class NameExpression:
    """``text`` parsed: ``qualified`` name (``ns::reduce``), ``entry`` (``reduce``) and the
    template arguments (None when the expression has no ``<...>``)."""

    text: str
    qualified: str
    entry: str
    args: tuple[str, ...] | None


@dataclass(frozen=True)
class TemplateParam:
    kind: str  # "type" | "value"
    name: str
    default: str | None = None


def _split_args(inner: str, text: str) -> tuple[str, ...]:
    """Split a template argument list at its top-level commas (``<``/``>`` inside parentheses
    are comparisons, not brackets)."""
    out: list[str] = []
    stack: list[str] = []
    start = 0
    pairs = {">": "<", ")": "(", "]": "[", "}": "{"}
    for i, ch in enumerate(inner):
        in_parens = bool(stack) and stack[-1] in "([{"
        if ch in "([{" or (ch == "<" and not in_parens):
            stack.append(ch)
        elif ch in ")]}" or (ch == ">" and not in_parens):
            if not stack or stack.pop() != pairs[ch]:
                raise SignatureError(f"unbalanced brackets in name expression {text!r}",
                                     hint=_HINT)
        elif ch == "," and not stack:
            out.append(inner[start:i])
            start = i + 1
    if stack:
        raise SignatureError(f"unbalanced brackets in name expression {text!r}", hint=_HINT)
    out.append(inner[start:])
    args = tuple(" ".join(a.split()) for a in out)
    if args == ("",):
        return ()
    if any(not a for a in args):
        raise SignatureError(f"empty template argument in name expression {text!r}", hint=_HINT)
    return args


def parse_name_expression(text: str) -> NameExpression:
    """``scale<float>`` -> entry ``scale``, args ``("float",)``; ``ns::f`` -> entry ``f``."""
    t = text.strip()
    lt = t.find("<")
    if lt >= 0:
        if not t.endswith(">"):
            raise SignatureError(f"name expression {text!r} does not end with '>'", hint=_HINT)
        base, args = t[:lt].strip(), _split_args(t[lt + 1:-1], text)
    else:
        base, args = t, None
    parts = [p.strip() for p in base.removeprefix("::").split("::")]
    if not parts or not all(p.isidentifier() for p in parts):
        raise SignatureError(f"name expression {text!r} does not name a function", hint=_HINT)
    return NameExpression(t, "::".join(parts), parts[-1], args)


def _template_node(root: Any, entry: str) -> Any | None:
    decl = entry_declarator(root, entry)
    if decl is None:
        return None
    n = decl.parent
    while n is not None and n.type not in _SCOPES:
        if n.type == "template_declaration":
            return n
        n = n.parent
    return None


def _template_param(node: Any, entry: str) -> TemplateParam:
    kind = node.type
    if kind == "type_parameter_declaration":
        name = next((c for c in node.named_children if c.type == "type_identifier"), None)
        if name is not None:
            return TemplateParam("type", _text(name))
    elif kind == "optional_type_parameter_declaration":
        name, default = node.child_by_field_name("name"), node.child_by_field_name("default_type")
        if name is not None:
            return TemplateParam("type", _text(name), _text(default) if default else None)
    elif kind in ("parameter_declaration", "optional_parameter_declaration"):
        decl, default = node.child_by_field_name("declarator"), \
            node.child_by_field_name("default_value")
        if decl is not None:
            return TemplateParam("value", _text(decl), _text(default) if default else None)
    raise SignatureError(f"template parameter {_text(node)!r} of {entry} is not supported "
                         "(variadic or template template parameter)",
                         hint="record this kernel through kernforge.Kernel with an explicit "
                              "signature")


def template_parameters(source: KernelSource) -> tuple[TemplateParam, ...] | None:
    """The template parameters of ``source.entry``; None when the entry is not a template."""
    root = _parser(source.language).parse(source.code.encode()).root_node
    tmpl = _template_node(root, source.entry)
    if tmpl is None:
        return None
    plist = tmpl.child_by_field_name("parameters")
    return tuple(_template_param(c, source.entry) for c in plist.named_children
                 if c.type != "comment")


def substitutions(params: tuple[TemplateParam, ...], expr: NameExpression) -> dict[str, str]:
    """Type parameter name -> C type, from the expression's arguments or the defaults."""
    args = expr.args or ()
    if len(args) > len(params):
        raise SignatureError(f"{expr.text!r} gives {len(args)} template arguments, "
                             f"{expr.entry} takes {len(params)}", hint=_HINT)
    out: dict[str, str] = {}
    for i, p in enumerate(params):
        value = args[i] if i < len(args) else p.default
        if value is None:
            raise SignatureError(
                f"template parameter {p.name!r} of {expr.entry} has no argument in "
                f"{expr.text!r} (deduced template arguments are not supported)",
                hint="give every template argument explicitly in the name expression")
        if p.kind == "type":  # a default may name earlier parameters: typename U = T
            out[p.name] = value if i < len(args) else _substitute(value, out)
    return out


def instantiated_signature(source: KernelSource, name_expression: str) -> tuple[Param, ...]:
    """The parameters of the instantiation ``name_expression`` of ``source.entry``."""
    expr = parse_name_expression(name_expression)
    if expr.entry != source.entry:
        raise SignatureError(f"name expression {name_expression!r} does not name the entry "
                             f"{source.entry!r}", hint="give the entry's base name as entry")
    params = template_parameters(source)
    if params is None:
        if expr.args:
            raise SignatureError(f"{source.entry} is not a template, but {name_expression!r} "
                                 "gives template arguments", hint=_HINT)
        return parse_signature(source)
    subs = substitutions(params, expr)
    try:
        sig = parse_signature(source, substitutions=subs)
    except SignatureError as exc:
        given = ", ".join(f"{k} = {v}" for k, v in subs.items())
        raise SignatureError(f"{name_expression} ({given}): {exc.message}",
                             hint=exc.hint) from None
    return tuple(Param(p.name, _substitute(p.ctype, subs), p.dtype, p.pointer, p.const)
                 for p in sig)


def _substitute(ctype: str, subs: dict[str, str]) -> str:
    words = re.split(r"(\W+)", ctype)
    return "".join(subs.get(w, w) for w in words)


def demangle_simple(symbol: str) -> str | None:
    """The qualified name of a plain (non-template) Itanium-mangled function, e.g.
    ``_ZN2ns4stepEPfi`` -> ``ns::step``; an unmangled identifier is returned as is; None when
    the symbol is a template instantiation or not understood."""
    if not symbol.startswith("_Z"):
        return symbol if symbol.isidentifier() else None
    s, parts = symbol[2:], []
    nested = s.startswith("N")
    s = s[1:] if nested else s
    while (m := re.match(r"\d+", s)) is not None:
        n = int(m.group())
        name, s = s[m.end():m.end() + n], s[m.end() + n:]
        if len(name) != n or not name.isidentifier():
            return None
        parts.append(name)
        if not nested:
            break
    if not parts or (nested and not s.startswith("E")):
        return None  # template arguments, qualifiers or something else we do not read
    if s.removeprefix("E" if nested else "").startswith("I"):
        return None
    parts = [p for p in parts if not p.startswith("_GLOBAL__N")]  # anonymous namespaces
    return "::".join(parts) or None


def short_name(symbol: str) -> str:
    """A readable name for any kernel symbol: the qualified name of an Itanium-mangled one
    without its template and parameter types (``_ZN2at6native6kernelILi4EEvT_`` ->
    ``at::native::kernel``; ``_Z5solvejPd`` -> ``solve``); other symbols are returned as is."""
    if not symbol.startswith("_Z"):
        return symbol
    s = symbol[2:].removeprefix("L")
    nested = s.startswith("N")
    s = s[1:].lstrip("KVr") if nested else s
    parts = []
    while (m := re.match(r"\d+", s)) is not None:
        n = int(m.group())
        name, s = s[m.end():m.end() + n], s[m.end() + n:]
        if len(name) != n:
            break
        if not name.startswith("_GLOBAL__N"):
            parts.append(name)
        if not nested:
            break
    return "::".join(parts) or symbol


_ITANIUM_SCALARS = {"f": "float32", "d": "float64", "i": "int32", "j": "uint32", "l": "int64",
                    "m": "uint64", "x": "int64", "y": "uint64", "s": "int16", "t": "uint16",
                    "c": "int8", "a": "int8", "h": "uint8", "DF16_": "float16"}


def pointee_dtype(symbol: str) -> str | None:
    """The element type all pointer parameters of an Itanium-mangled kernel share
    (``_Z11jacobi_stepPfPKfS_`` -> ``float32``); None when they differ or are not plain."""
    m = re.match(r"_Z(?:L)?(\d+)", symbol)
    if not m:
        return None
    params = symbol[m.end() + int(m.group(1)):]
    found = {_ITANIUM_SCALARS[t] for t in re.findall(r"P(?:K|V|r)*(DF16_|[fdijlmxystcah])", params)}
    return found.pop() if len(found) == 1 else None


_BUILTIN = re.compile(r"DF16_|[vbcahstijlmxyfd]")


class _Mangled:
    """A reader of the parameter types of a simple Itanium-mangled function: an unscoped name,
    with or without template arguments, parameters of builtin, pointer, cv-qualified,
    template-parameter and substituted types (what CUDA kernels' symbols hold)."""

    def __init__(self, text: str) -> None:
        self.s, self.at = text, 0
        self.subs: list[str] = []  # substitution candidates, as readable types
        self.targs: list[str] = []

    def _peek(self, k: int = 1) -> str:
        return self.s[self.at:self.at + k]

    def _ref(self, lead: str) -> str:
        """``T_``/``T<n>_`` or ``S_``/``S<seq-id>_`` (base 36), the ``lead`` already read."""
        m = re.match(r"([0-9A-Z]*)_", self.s[self.at:])
        if m is None:
            raise ValueError("a reference without its closing underscore")
        self.at += m.end()
        k = int(m.group(1), 36) + 1 if m.group(1) else 0
        table = self.targs if lead == "T" else self.subs
        if k >= len(table):
            raise ValueError(f"{lead}{m.group(1)}_ refers past what was read")
        return table[k]

    def type(self) -> str:
        c = self._peek()
        if c in ("P", "K", "V", "r"):
            self.at += 1
            inner = self.type()
            got = f"{inner}*" if c == "P" else f"{inner} {'const' if c == 'K' else c}"
            self.subs.append(got)
            return got
        if c in ("T", "S"):
            self.at += 1
            got = self._ref(c)
            if c == "T":
                self.subs.append(got)
            return got
        m = _BUILTIN.match(self.s, self.at)
        if m is None:
            raise ValueError(f"type code {c!r} is not read here")
        self.at = m.end()
        return m.group()

    def template_args(self) -> None:
        while self._peek() != "E":
            if self._peek() == "L":  # a literal: L <type> <value> E
                end = self.s.index("E", self.at)
                self.targs.append(self.s[self.at:end + 1])
                self.at = end + 1
            else:
                self.targs.append(self.type())
        self.at += 1

    def params(self) -> list[str]:
        m = re.match(r"_Z(\d+)", self.s)
        if m is None:
            raise ValueError("not an unscoped mangled name")
        self.at = m.end() + int(m.group(1))
        if self._peek() == "I":
            self.subs.append("<template>")  # the template's name is a candidate itself
            self.at += 1
            self.template_args()
            self.type()  # a template function's encoding holds its return type
        out = []
        while self.at < len(self.s):
            out.append(self.type())
        return out


def pointer_dtypes(symbol: str) -> dict[int, str] | None:
    """The element dtype of each pointer parameter of a kernel (by parameter index) from its
    Itanium-mangled ``symbol``, template arguments resolved
    (``_Z12sum_partialsIdLi256EEvPKT_PS0_i`` -> ``{0: 'float64', 1: 'float64'}``); None when
    the symbol is not mangled or holds what this reader does not read (nested names)."""
    try:
        types = _Mangled(symbol).params()
    except (ValueError, IndexError):
        return None
    if types == ["v"]:
        types = []
    out = {}
    for i, t in enumerate(types):
        if t.endswith("*"):
            base = t[:-1].removesuffix(" const").removesuffix(" V").removesuffix(" r")
            if base in _ITANIUM_SCALARS:
                out[i] = _ITANIUM_SCALARS[base]
    return out
