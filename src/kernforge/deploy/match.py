"""Does an application's launch match a deployment entry? Each check returns None or a reason.

A launch matches an entry when, in this order: the kernel is the same (backend, language,
entry, sha256 of the code, name expression: the lookup key), the device is the same (the
backend's ``deploy_identity()``), the kernel was built the same way (compile options, with
unset knobs at their defaults, and ``#define``s), the launch geometry is the recorded one
(grid, block, dynamic shared memory) and the arguments are the same problem (names, dtypes,
array shapes, values of integer scalars and of scalars the tuned variant compiles in, and
which array arguments overlap in memory: a tuned variant, e.g. one with ``__restrict__``, was
verified on the recording's distinct buffers only, so an in-place call ``k(a, a)`` runs the
original).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends import Backend, LaunchEvent
from ..core import CompileOptions, KernelSource, LaunchConfig, Variant
from . import specdoc
from .spec import DeployEntry, ProblemArg

# Fallback categories, from the least to the most specific (the report names the furthest).
NOT_IN_SPEC = specdoc.NOT_IN_SPEC
DEVICE = "device mismatch"
BUILD = "build mismatch"
PROBLEM = "problem mismatch"
ALIASING = "aliasing"  # a problem mismatch: array arguments share memory, the spec's do not
COMPILE = "compile failure"
LAUNCH = "launch failure"
INTERNAL = "internal error"
EVIDENCE = "evidence"  # not verified, measured while busy, or not significant (deploy/gate.py)
VERIFY = "re-verification"  # outputs differ from the original kernel's, or cannot be compared
_RANK = {NOT_IN_SPEC: 0, DEVICE: 1, BUILD: 2, PROBLEM: 3, ALIASING: 3}


@dataclass(frozen=True)
class Reason:
    """Why a launch runs the original: a category (counted) and a detail (logged)."""

    category: str
    detail: str

    @property
    def rank(self) -> int:
        return _RANK.get(self.category, len(_RANK))


def device_reason(entry: DeployEntry, device: Mapping[str, Any]) -> Reason | None:
    if dict(entry.device) == dict(device):
        return None
    return Reason(DEVICE, f"this device is {dict(device)}, the spec's {dict(entry.device)}")


def build_reason(entry: DeployEntry, backend: Backend, options: CompileOptions,
                 defines: tuple[tuple[str, str], ...]) -> Reason | None:
    here = dict(options.values)
    knobs = {k.name: k.default for k in backend.knobs()}
    spec = {**knobs, **entry.kernel.options}
    for name in sorted(set(spec) | set(here)):
        if name not in knobs:
            return Reason(BUILD, f"option {name!r} is not an option of backend {backend.name!r}")
        if here.get(name, knobs[name]) != spec[name]:
            return Reason(BUILD, f"compiled with {name}={here.get(name, knobs[name])!r}, "
                          f"the spec's kernel with {name}={spec[name]!r}")
    if dict(defines) != dict(entry.kernel.defines):
        return Reason(BUILD, f"compiled with #defines {dict(defines)}, the spec's kernel with "
                      f"{dict(entry.kernel.defines)}")
    return None


def static_candidates(entries: list[tuple[int, DeployEntry]], device: Mapping[str, Any],
                      backend: Backend, options: CompileOptions,
                      defines: tuple[tuple[str, str], ...]) -> list[int] | Reason:
    """The indices of the entries (of this kernel) for this device and build, else the most
    specific reason why none is."""
    ok, best = [], None
    for i, entry in entries:
        reason = device_reason(entry, device) or build_reason(entry, backend, options, defines)
        if reason is None:
            ok.append(i)
        elif best is None or reason.rank > best.rank:
            best = reason
    return ok or best or Reason(NOT_IN_SPEC, "no entry")


def _same_value(dtype: str, got: Any, want: Any) -> bool:
    try:
        dt = np.dtype(dtype)
        return bool(dt.type(got) == dt.type(want))
    except (TypeError, ValueError, OverflowError):
        return False


def _arg_reason(spec: ProblemArg, param_dtype: str, pointer: bool, value: Any,
                is_buffer: bool) -> str | None:
    if spec.kind == "array":
        if not pointer or not is_buffer:
            return f"{spec.name} is not an array here"
        shape, dtype = tuple(getattr(value, "shape", ())), getattr(value, "dtype", None)
        if dtype is None or dtype != np.dtype(spec.dtype) or shape != spec.shape:
            return f"{spec.name} is {dtype}{list(shape)}, the spec's {spec.dtype}" \
                   f"{list(spec.shape or ())}"
        return None
    if pointer or param_dtype != spec.dtype:
        return f"{spec.name} is declared {param_dtype}, the spec's {spec.dtype}"
    if spec.value is not None and not _same_value(spec.dtype, value, spec.value):
        return f"{spec.name}={value!r}, the spec's {spec.value!r}"
    return None


def _byte_range(value: Any) -> tuple[int, int] | None:
    """[lo, hi) of the bytes an array (NumPy, CuPy, or anything with
    ``__cuda_array_interface__``) can touch; None when unknown (then treated as overlapping
    anything)."""
    try:
        ptr = getattr(getattr(value, "data", None), "ptr", None)  # CuPy: no interface dict
        if isinstance(ptr, int):
            if getattr(getattr(value, "flags", None), "c_contiguous", False):
                return (ptr, ptr + int(value.nbytes))  # the common case, without a loop
            shape = tuple(value.shape)
            strides, itemsize = tuple(value.strides), int(value.itemsize)
        else:
            iface = getattr(value, "__cuda_array_interface__", None)
            if iface is None:
                iface = value.__array_interface__
            ptr = int(iface["data"][0])
            shape = tuple(int(n) for n in iface["shape"])
            itemsize = np.dtype(iface["typestr"]).itemsize
            strides = iface.get("strides")
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    if any(n == 0 for n in shape):
        return (ptr, ptr)
    if strides is None:  # C-contiguous
        strides, step = [], itemsize
        for n in reversed(shape):
            strides.insert(0, step)
            step *= n
    lo = ptr + sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    hi = ptr + sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) + itemsize
    return (lo, hi)


def _overlap(a: Any, b: Any, ra: tuple[int, int] | None, rb: tuple[int, int] | None) -> bool:
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return bool(np.may_share_memory(a, b))  # the same bounds test, in C
    empty = (ra is not None and ra[0] == ra[1]) or (rb is not None and rb[0] == rb[1])
    return not empty and (ra is None or rb is None or (ra[0] < rb[1] and rb[0] < ra[1]))


def overlaps(a: Any, b: Any) -> bool:
    """``overlap_bits([a, b])[0]``, without the lists (a route key's common case); two
    C-contiguous device arrays with ``.data.ptr`` (CuPy's) by their pointers directly."""
    if type(a) is np.ndarray and type(b) is np.ndarray:
        return bool(np.may_share_memory(a, b))
    try:  # _byte_range's first case for both, inline
        pa, pb, fa, fb, na, nb = a.data.ptr, b.data.ptr, a.flags, b.flags, a.nbytes, b.nbytes
        if type(pa) is int and type(pb) is int and type(na) is int and type(nb) is int and \
                fa.c_contiguous and fb.c_contiguous:
            return na != 0 and nb != 0 and pa < pb + nb and pb < pa + na
    except AttributeError:
        pass
    return _overlap(a, b, _byte_range(a), _byte_range(b))


def overlap_bits(values: list[Any]) -> list[bool]:
    """For each pair (i < j) of the arrays, in order: whether their memory overlaps (bounds of
    the bytes each can touch; an empty array overlaps nothing)."""
    if len(values) == 2 and type(values[0]) is np.ndarray and type(values[1]) is np.ndarray:
        return [bool(np.may_share_memory(values[0], values[1]))]  # the common case, in C
    numpy = all(type(v) is np.ndarray for v in values)
    ranges = [None if numpy else _byte_range(v) for v in values]
    return [_overlap(a, values[j], ranges[i], ranges[j])
            for i, a in enumerate(values) for j in range(i + 1, len(values))]


def overlapping(named: list[tuple[str, Any]]) -> tuple[tuple[str, ...], ...]:
    """Groups (in argument order) of the named arrays whose memory overlaps (see
    :func:`overlap_bits`)."""
    bits = iter(overlap_bits([v for _, v in named]))
    parent = list(range(len(named)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    for i in range(len(named)):
        for j in range(i + 1, len(named)):
            if next(bits):
                parent[root(j)] = root(i)
    groups: dict[int, list[str]] = {}
    for i, (name, _) in enumerate(named):
        groups.setdefault(root(i), []).append(name)
    return tuple(tuple(g) for g in groups.values() if len(g) > 1)


def aliasing_reason(entry: DeployEntry, event: LaunchEvent) -> Reason | None:
    arrays = [(a.name, v) for a, v in zip(entry.problem.args, event.args) if a.kind == "array"]
    if len(arrays) < 2:
        return None
    got = overlapping(arrays)
    want = tuple(tuple(g) for g in entry.problem.aliases)
    if sorted(got) == sorted(want):
        return None
    shared = "; ".join(" and ".join(g) for g in got) or "none"
    return Reason(ALIASING, f"arguments sharing memory here: {shared}; in the spec's "
                  f"problem: {'; '.join(' and '.join(g) for g in want) or 'none'}")


def problem_reason(entry: DeployEntry, event: LaunchEvent) -> Reason | None:
    want, got = entry.problem.launch, event.launch
    if (got.grid, got.block, got.shared_mem) != (want.grid, want.block, want.shared_mem):
        return Reason(PROBLEM, f"launched with grid {got.grid} block {got.block} shared_mem "
                      f"{got.shared_mem}, the spec's grid {want.grid} block {want.block} "
                      f"shared_mem {want.shared_mem}")
    args = entry.problem.args
    if [p.name for p in event.signature] != [a.name for a in args] \
            or len(event.args) != len(args):
        return Reason(PROBLEM, f"parameters ({', '.join(p.name for p in event.signature)}) "
                      f"differ from the spec's ({', '.join(a.name for a in args)})")
    for spec, p, value in zip(args, event.signature, event.args):
        detail = _arg_reason(spec, p.dtype, p.pointer, value,
                             p.pointer and event.backend.is_buffer(value))
        if detail is not None:
            return Reason(PROBLEM, detail)
    return aliasing_reason(entry, event)


def tuned_variant(entry: DeployEntry, original: KernelSource) -> Variant:
    """The variant to compile: the entry's code (or the application's original source, which
    carries its resolved signature) with the entry's options, defines and constants."""
    v = entry.variant
    source = original if v.code is None else original.with_code(v.code)
    return Variant(source, options=CompileOptions.of(v.options), launch=v.launch,
                   defines=tuple(v.defines.items()), constants=tuple(v.constants.items()))


def tuned_launch(entry: DeployEntry, event: LaunchEvent) -> LaunchConfig:
    """The entry's launch geometry; a null thread count keeps the application's."""
    launch = entry.variant.launch
    if launch.threads is None and event.launch.threads is not None:
        return LaunchConfig(launch.grid, launch.block, launch.shared_mem, event.launch.threads)
    return launch


def lookup_key(backend: Backend, source: KernelSource, options: Mapping[str, Any],
               sha: str) -> tuple[str, str, str, str, str | None]:
    return specdoc.lookup_key(backend.name, source.language, source.entry, sha, options)
