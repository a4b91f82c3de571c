"""Straight-line code for the two per-launch steps of a routed CuPy launch.

A routed launch (:mod:`.fastpath`) costs its raw key and its conversion; both walk the
kernel's arguments by position, and the positions are fixed per kernel (the key: which are
arrays, which scalars are keyed) or per route (the conversion: what each argument needs).
Written as loops over those positions, Python spends most of the time on the loops
themselves; so each is generated once as a function without loops (as ``dataclasses``
generates ``__init__``), from integers and the kinds of :func:`~.launcher.direct` only: no
name or text from the application reaches the generated source. The loops they replace
stay the reference (:meth:`.fastpath.Plan.route_key_loop`; the steps of
:func:`~.launcher.direct`, which tests/deploy/test_straight.py runs as a loop) and the
tests compare them on varied arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

_MAX_ARGS = 64  # more arguments: the loops (a kernel this long is rare, its code long)


def _compile(source: str, name: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    exec(compile(source, f"<kernforge.deploy.straight {name}>", "exec"), namespace)  # noqa: S102
    fn: Callable[..., Any] = namespace[name]
    return fn


def route_key(arity: int, pointers: Sequence[int], values: Sequence[int], aliasing: bool,
              env: dict[str, Any], loop: Callable[..., Any]) -> Callable[..., Any]:
    """``Plan.route_key_loop`` of a plan whose kernel has ``arity`` parameters (``pointers``,
    ``values``, ``aliasing``: the plan's), for launches passing that many arguments; ``loop``
    (the loop itself) for others. ``env``: the names the loop uses (``KEYABLE``,
    ``overlaps``, ``overlap_bits``)."""
    if arity > _MAX_ARGS:
        return loop
    names = ", ".join(f"a{j}" for j in range(arity))
    lines = ["def key(grid, block, shared_mem, args, buffer):",
             "    if type(shared_mem) is not int:",
             "        return None"]
    for dims in ("grid", "block"):  # _exact(dims), inline
        lines += [f"    t = type({dims})",
                  "    if t is tuple:",
                  f"        for v in {dims}:",
                  "            if type(v) is not int:",
                  "                return None",
                  "    elif t is not int:",
                  "        return None"]
    lines += [f"    if len(args) != {arity}:",
              "        return loop(grid, block, shared_mem, args, buffer)"]
    if arity:
        lines.append(f"    {names}{',' if arity == 1 else ''} = args")
    parts = ["grid", "block", "shared_mem", str(arity)]
    for j in pointers:
        lines += [f"    if type(a{j}) is not buffer:", "        return None"]
        parts += [f"a{j}.dtype", f"a{j}.shape"]
    for j in values:
        lines += [f"    t{j} = type(a{j})", f"    if t{j} not in KEYABLE:", "        return None"]
        parts += [f"t{j}", f"a{j}"]
    if aliasing and len(pointers) == 2:
        parts.append(f"overlaps(a{pointers[0]}, a{pointers[1]})")
    elif aliasing and len(pointers) > 2:
        parts.append("*overlap_bits([" + ", ".join(f"a{j}" for j in pointers) + "])")
    lines.append(f"    return ({', '.join(parts)})")
    return _compile("\n".join(lines), "key", {**env, "loop": loop})


def conversion(steps: Sequence[tuple[int, Any]], kinds: tuple[int, int, int, int]
               ) -> Callable[[Sequence[Any]], list[Any] | None]:
    """The steps of :func:`~.launcher.direct` as one function of the raw arguments: the
    launched ones, or None when one of them needs more (``kinds``: the values of its
    ``_IN, _OUT, _CONST, _TYPED``)."""
    in_, out_, const, typed = kinds
    n = len(steps)
    env: dict[str, Any] = {}
    lines = ["def convert(args):", f"    if len(args) != {n}:", "        return None"]
    if n:
        lines.append("    " + ", ".join(f"a{j}" for j in range(n)) + ("," if n == 1 else "")
                     + " = args")
    result = []
    for j, (kind, x) in enumerate(steps):
        if kind == const:
            env[f"c{j}"] = x
            result.append(f"c{j}")
            continue
        result.append(f"a{j}")
        if kind == typed:
            env[f"t{j}"] = x
            lines += [f"    if type(a{j}) is not t{j}:", "        return None"]
        elif kind in (in_, out_):
            lines.append(f"    f = a{j}.flags")
            test = "not f.c_contiguous" + (
                " or not getattr(f, 'writeable', True)" if kind == out_ else "")
            lines += [f"    if {test}:", "        return None"]
        else:
            raise ValueError(f"unknown step kind {kind}")
    lines.append(f"    return [{', '.join(result)}]")
    return _compile("\n".join(lines), "convert", env)
