"""A stencil program: what one launch of a stencil or PDE kernel computes (docs/stencil-programs.md).

Named fields of one shape (``in``: read; ``coef``: a coefficient field, read; ``out``: written;
``inout``: read and written in place), per written field an expression over taps, reductions
fused into the sweep, and a boundary rule per face. Every read sees the fields as they were
before the launch; an ``inout`` field is therefore read only at the point being written (a
neighbour would be a race between threads).

Boundary, per face (``z- z+ y- y+ x- x+``): ``keep`` (the points within ``width`` of the face
keep their values), ``copy`` (they take the value of ``copy_from`` there), ``zero``,
``zeropad`` (the expression is evaluated there, reading zero outside the grid), ``clamp``
(evaluated, reading the nearest point inside: a replicated edge) or ``periodic`` (evaluated,
reading the grid wrapped; both faces of the axis). ``width`` None means the
expression's reach past that face. A point within the width of several faces follows the first
of them, in the order above, whose rule is keep, copy or zero.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...core import ConfigError
from ...core.jsonio import canonical_json
from . import expr as ex

FACES = ("z-", "z+", "y-", "y+", "x-", "x+")
RULES = ("keep", "copy", "zero", "zeropad", "clamp", "periodic")
WRITING = ("keep", "copy", "zero")
ROLES = ("in", "coef", "out", "inout")
PRECISIONS = ("fp16", "fp32", "fp64")
REDUCTIONS = ("sum", "sumsq", "maxabs")
MAX_REACH = 8
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
HINT = "see docs/stencil-programs.md"


def _err(msg: str, hint: str = HINT) -> ConfigError:
    return ConfigError(f"stencil program: {msg}", hint=hint)


def _json_str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"{v!r} is not a string")
    return v


@dataclass(frozen=True)
class Field:
    name: str
    role: str = "in"


@dataclass(frozen=True)
class FaceRule:
    rule: str = "keep"
    width: int | None = None  # None: the expression's reach past the face


@dataclass(frozen=True)
class Output:
    """``field`` (role out or inout) = ``expr``; ``copy_from``: the field a copy face copies."""

    field: str
    expr: ex.Expr
    copy_from: str | None = None


@dataclass(frozen=True)
class Reduction:
    """A scalar output: ``op`` (sum, sumsq, maxabs) of ``expr`` over the points ``over``
    ("computed": those every output computes; "all"); ``accumulate``: added to (max with) the
    scalar's value before the launch. ``expr`` reads written fields after the sweep, at the
    point only."""

    name: str
    op: str
    expr: ex.Expr
    accumulate: bool = False
    over: str = "computed"


def boundary(default: str = "keep", faces: Mapping[str, str | FaceRule] | None = None,
             width: int | None = None) -> tuple[FaceRule, ...]:
    """Face rules in :data:`FACES` order: ``default`` everywhere, ``faces`` overriding."""
    out = []
    for f in FACES:
        r = (faces or {}).get(f, default)
        out.append(r if isinstance(r, FaceRule) else FaceRule(r, width))
    return tuple(out)


@dataclass(frozen=True)
class StencilProgram:
    dims: int
    precision: str
    fields: tuple[Field, ...]
    outputs: tuple[Output, ...]
    reductions: tuple[Reduction, ...] = ()
    faces: tuple[FaceRule, ...] = field(default_factory=boundary)
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "reductions", tuple(self.reductions))
        faces = tuple(self.faces)
        # faces of the axes a lower-dimensional grid does not have: nothing to do there
        unused = FACES[:2 * (3 - self.dims)] if self.dims in (1, 2, 3) else ()
        faces = tuple(FaceRule("keep", 0) if f in unused else r
                      for f, r in zip(FACES, faces, strict=False))
        object.__setattr__(self, "faces", faces)
        validate(self)

    # --- queries -------------------------------------------------------------------------
    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise _err(f"no field {name!r}", hint=f"fields: {[f.name for f in self.fields]}")

    def names(self, *roles: str) -> list[str]:
        return [f.name for f in self.fields if f.role in roles]

    def output(self, name: str) -> Output:
        for o in self.outputs:
            if o.field == name:
                return o
        raise _err(f"no output {name!r}", hint=f"outputs: {[o.field for o in self.outputs]}")

    def rule(self, face: str) -> FaceRule:
        return self.faces[FACES.index(face)]

    def widths(self, out: Output) -> dict[str, int]:
        """Per face, how many layers the face's keep/copy/zero rule writes (0 for the
        evaluated rules: their points are computed)."""
        r = ex.reach(out.expr)
        return {f: 0 if fr.rule not in WRITING else (r[f] if fr.width is None else fr.width)
                for f, fr in zip(FACES, self.faces, strict=True)}

    def periodic(self) -> tuple[bool, bool, bool]:
        """Per axis (z, y, x): whether its faces wrap."""
        return tuple(self.rule(f"{a}-").rule == "periodic" for a in "zyx")  # type: ignore[return-value]

    def pads(self) -> tuple[tuple[str, str], tuple[str, str], tuple[str, str]]:
        """Per axis (z, y, x), what a read past its lower and upper face sees: zero, wrap or
        clamp."""
        word = {"periodic": "wrap", "clamp": "clamp"}
        return tuple((word.get(self.rule(f"{a}-").rule, "zero"),  # type: ignore[return-value]
                      word.get(self.rule(f"{a}+").rule, "zero")) for a in "zyx")

    def kind(self, out: Output) -> str:
        """``linear``, ``affine``, ``bilinear`` (degree 2) or ``polynomial`` (higher)."""
        d = ex.degree(out.expr)
        if d >= 3:
            return "polynomial"
        if d == 2:
            return "bilinear"
        return "affine" if () in ex.polynomial(out.expr, _Generic(), _Generic()) else "linear"

    def params(self) -> list[int]:
        return sorted({n.index for e in self._exprs() for n in ex.walk(e)
                       if isinstance(n, ex.Param)})

    def constants(self) -> list[str]:
        return sorted({n.name for e in self._exprs() for n in ex.walk(e)
                       if isinstance(n, ex.ConstMem)})

    def _exprs(self) -> list[ex.Expr]:
        return [o.expr for o in self.outputs] + [r.expr for r in self.reductions]

    # --- JSON and identity ---------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "dims": self.dims, "precision": self.precision, "name": self.name,
            "fields": [{"name": f.name, "role": f.role} for f in self.fields],
            "outputs": [{"field": o.field, "expr": ex.to_json(o.expr),
                         **({"copy_from": o.copy_from} if o.copy_from else {})}
                        for o in self.outputs],
            "reductions": [{"name": r.name, "op": r.op, "expr": ex.to_json(r.expr),
                            "accumulate": r.accumulate, "over": r.over}
                           for r in self.reductions],
            "faces": {f: {"rule": r.rule, "width": r.width}
                      for f, r in zip(FACES, self.faces, strict=True)},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StencilProgram:
        try:
            faces = d.get("faces", {})
            return cls(
                dims=ex.json_int(d["dims"]), precision=str(d["precision"]),
                name=_json_str(d.get("name", "")),
                fields=tuple(Field(str(f["name"]), str(f.get("role", "in")))
                             for f in d["fields"]),
                outputs=tuple(Output(str(o["field"]), ex.from_json(o["expr"]),
                                     o.get("copy_from")) for o in d["outputs"]),
                reductions=tuple(Reduction(str(r["name"]), str(r["op"]),
                                           ex.from_json(r["expr"]),
                                           ex.json_bool(r.get("accumulate", False)),
                                           str(r.get("over", "computed")))
                                 for r in d.get("reductions", ())),
                faces=tuple(FaceRule(str(faces.get(f, {}).get("rule", "keep")),
                                     faces.get(f, {}).get("width")) for f in FACES))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise _err(f"malformed document ({type(exc).__name__}: {exc})") from None

    @property
    def key(self) -> str:
        """A digest of what the program computes (its name left out): equal programs, one key."""
        import hashlib

        doc = self.to_json()
        doc.pop("name")
        return hashlib.sha256(canonical_json(doc)).hexdigest()[:16]

    def renamed(self, name: str) -> StencilProgram:
        return replace(self, name=name)

    def describe(self) -> str:
        lines = [f"{self.dims}D {self.precision} program {self.name or self.key}"]
        for o in self.outputs:
            lines.append(f"  {o.field} = {ex.describe(o.expr)}  [{self.kind(o)}]")
        for r in self.reductions:
            acc = " (accumulated)" if r.accumulate else ""
            lines.append(f"  {r.name} = {r.op}({ex.describe(r.expr)}) over {r.over}{acc}")
        used = FACES[2 * (3 - self.dims):]
        lines.append("  faces: " + ", ".join(
            f"{f} {r.rule}" + (f"/{r.width}" if r.width is not None and r.rule in WRITING
                               else "") for f, r in zip(FACES, self.faces, strict=True)
            if f in used))
        return "\n".join(lines)


class _Generic(dict):  # type: ignore[type-arg]
    """A value for every parameter and constant, unlike any other (the structure of an
    expansion: a constant term that cancels only for special values is kept)."""

    def __contains__(self, k: object) -> bool:
        return True

    def __getitem__(self, k: object) -> Any:
        v = 1.0 + zlib.crc32(str(k).encode()) % 9973 / 9973.0
        return [v + i for i in range(64)] if isinstance(k, str) else v


def validate(p: StencilProgram) -> None:
    """ConfigError (with a hint) for the first thing wrong with ``p``."""
    if p.dims not in (1, 2, 3):
        raise _err(f"dims {p.dims!r}", hint="1, 2 or 3")
    if p.precision not in PRECISIONS:
        raise _err(f"precision {p.precision!r}", hint=f"one of {PRECISIONS}")
    names = [f.name for f in p.fields]
    for fd in p.fields:
        if not isinstance(fd.name, str) or not _NAME.match(fd.name):
            raise _err(f"field name {fd.name!r}", hint="an identifier")
        if fd.role not in ROLES:
            raise _err(f"field {fd.name!r} has role {fd.role!r}", hint=f"one of {ROLES}")
    if len(set(names)) != len(names):
        raise _err(f"duplicate field names in {names}")
    if not p.outputs:
        raise _err("no output", hint="give each out/inout field an Output")
    written = [o.field for o in p.outputs]
    if len(set(written)) != len(written):
        raise _err(f"a field has two outputs: {written}", hint="one expression per field")
    for name in p.names("out", "inout"):
        if name not in written:
            raise _err(f"field {name!r} (role {p.field(name).role}) has no output expression")
    if len(p.faces) != len(FACES):
        raise _err(f"{len(p.faces)} face rules", hint=f"one per face {FACES}")
    for f, fr in zip(FACES, p.faces, strict=True):
        if fr.rule not in RULES:
            raise _err(f"face {f}: rule {fr.rule!r}", hint=f"one of {RULES}")
        if fr.width is not None and (not isinstance(fr.width, int) or fr.width < 0):
            raise _err(f"face {f}: width {fr.width!r}", hint="a count of layers >= 0, or None")
    for a in "zyx":
        lo, hi = p.rule(f"{a}-").rule, p.rule(f"{a}+").rule
        if (lo == "periodic") != (hi == "periodic"):
            raise _err(f"axis {a}: periodic on one face only ({lo}/{hi})",
                       hint="a periodic axis wraps at both faces")
    for o in p.outputs:
        if p.field(o.field).role not in ("out", "inout"):
            raise _err(f"output {o.field!r} is a field of role {p.field(o.field).role}",
                       hint="written fields have role out or inout")
        _check_expr(p, o.expr, f"output {o.field}", reduction=False)
        widths, reach = p.widths(o), ex.reach(o.expr)
        for face, fr in zip(FACES, p.faces, strict=True):
            if fr.rule in WRITING and widths[face] < reach[face]:
                raise _err(f"output {o.field}: face {face} {fr.rule} of width {widths[f]} but the "
                           f"expression reaches {reach[f]} past it (reads outside the grid)",
                           hint="a width at least the reach, or zeropad/clamp/periodic")
        if any(fr.rule == "copy" for fr in p.faces):
            src = o.copy_from
            if src is None or p.field(src).role == "out":
                raise _err(f"output {o.field}: a copy face needs copy_from naming a field "
                           "that is read", hint="Output(..., copy_from='u')")
    arrays: dict[str, bool] = {}
    for e in p._exprs():
        for n in ex.walk(e):
            if isinstance(n, ex.ConstMem) and arrays.setdefault(n.name, n.array) != n.array:
                raise _err(f"__constant__ {n.name!r} is read both as a scalar and as an array",
                           hint="ConstMem(name, index, array=True) for every element of an "
                                "array")
    rnames = [red.name for red in p.reductions]
    if len(set(rnames)) != len(rnames) or set(rnames) & set(names):
        raise _err(f"reduction names {rnames} repeat or clash with field names")
    for red in p.reductions:
        if not _NAME.match(red.name):
            raise _err(f"reduction name {red.name!r}", hint="an identifier")
        if red.op not in REDUCTIONS:
            raise _err(f"reduction {red.name}: op {red.op!r}", hint=f"one of {REDUCTIONS}")
        if red.over not in ("computed", "all"):
            raise _err(f"reduction {red.name}: over {red.over!r}", hint="computed or all")
        _check_expr(p, red.expr, f"reduction {red.name}", reduction=True)


def _check_expr(p: StencilProgram, e: ex.Expr, where: str, *, reduction: bool) -> None:
    for n in ex.walk(e):
        if isinstance(n, ex.Tap):
            if n.field not in [f.name for f in p.fields]:
                raise _err(f"{where} reads unknown field {n.field!r}")
            role = p.field(n.field).role
            off = n.offset
            if len(off) != 3 or not all(isinstance(v, int) for v in off):
                raise _err(f"{where}: offset {off!r}", hint="(dz, dy, dx) integers")
            if (p.dims < 3 and off[0]) or (p.dims < 2 and off[1]):
                raise _err(f"{where}: offset {off} on a {p.dims}D grid",
                           hint="leave the missing axes' offsets 0")
            if max(abs(v) for v in off) > MAX_REACH:
                raise _err(f"{where}: offset {off} beyond {MAX_REACH}")
            if role == "out" and not reduction:
                raise _err(f"{where} reads {n.field!r}, a field it writes (role out)",
                           hint="reads see the fields before the launch: make it inout, or "
                                "read another field")
            if role in (("inout",) if not reduction else ("out", "inout")) and off != (0, 0, 0):
                raise _err(f"{where} reads written field {n.field!r} at {off}: in place, a "
                           "neighbour's value depends on the order of the threads",
                           hint="read written fields at (0, 0, 0) only")
        elif isinstance(n, ex.Bin):
            if n.op not in ex.OPS:
                raise _err(f"{where}: operator {n.op!r}", hint=f"one of {ex.OPS}")
            if n.op == "/" and not ex.is_scalar(n.b):
                raise _err(f"{where}: division by an expression that reads a field",
                           hint="divide by constants, parameters or __constant__ values")
            if n.op == "/" and isinstance(n.b, ex.Const) and n.b.value == 0:
                raise _err(f"{where}: division by zero")
        elif isinstance(n, ex.Param):
            if not isinstance(n.index, int) or n.index < 0:
                raise _err(f"{where}: parameter index {n.index!r}", hint="an index >= 0")
        elif isinstance(n, ex.ConstMem):
            if not _NAME.match(n.name) or n.index < 0:
                raise _err(f"{where}: __constant__ {n.name!r}[{n.index}]")
        elif not isinstance(n, ex.Const | ex.Neg):
            raise _err(f"{where}: {n!r} is not an expression node")


def program(dims: int, precision: str, outputs: Mapping[str, ex.Expr], *,
            roles: Mapping[str, str] | None = None, faces: Sequence[FaceRule] | None = None,
            reductions: Sequence[Reduction] = (), copy_from: Mapping[str, str] | None = None,
            name: str = "") -> StencilProgram:
    """A program from its outputs' expressions: the fields they read get role ``in`` (or what
    ``roles`` says), the written fields ``out`` (``inout`` when their expression reads them)."""
    r = dict(roles or {})
    order: list[str] = []
    for out, e in outputs.items():
        for t in ex.taps(e):
            order.append(t.field)
        order.append(out)
    for red in reductions:
        order.extend(t.field for t in ex.taps(red.expr))
    stray = sorted(set(r) - set(order))
    if stray:
        raise _err(f"roles name {stray}, which no output or reduction reads or writes",
                   hint="name fields the expressions use (a misspelt name?)")
    fields = []
    for n in dict.fromkeys(order):
        if n in outputs:
            role = r.get(n, "inout" if any(t.field == n for t in ex.taps(outputs[n])) else "out")
        else:
            role = r.get(n, "in")
        fields.append(Field(n, role))
    single = [f.name for f in fields if f.role == "in"]
    fcs = tuple(faces) if faces is not None else boundary()
    copies = any(f.rule == "copy" for f in fcs)
    cf = dict(copy_from or {})

    def source(f: Field) -> str | None:
        if f.name in cf or not copies:
            return cf.get(f.name)
        return f.name if f.role == "inout" else single[0] if len(single) == 1 else None

    outs = tuple(Output(f.name, outputs[f.name], source(f)) for f in fields
                 if f.name in outputs)
    return StencilProgram(dims, precision, tuple(fields), outs, tuple(reductions), fcs, name)
