"""CuPy kernels and launches in kernforge terms: pure functions, no CuPy import.

- :func:`map_options`: CuPy/NVRTC option strings -> cuda backend knobs, ``#define``s, and the
  rest verbatim (the ``extra_options`` knob);
- :func:`describe_kernel`: a CuPy kernel (code, symbol, name expression, options) -> a
  :class:`KernelInfo` (source with its resolved signature, resolved options, defines);
- :func:`widen_scalar` / :func:`convert_args`: launch arguments as the kernel *read* them.

CuPy passes a Python ``int`` as int64, a ``float`` as float64, a ``bool`` as a 1-byte bool, a
numpy scalar or size-1 numpy array by value with its own dtype, whatever the parameter's
declared type; the kernel reads the first ``sizeof(param)`` bytes. So a recorded scalar is the
low bytes of what CuPy passed, reinterpreted as the declared dtype (little-endian hosts): an
in-range int is the same value; a Python float given to a ``float`` parameter is recorded as
the float the kernel actually saw. A launch that cannot be replayed faithfully (a null pointer,
a non-contiguous or overlapping written buffer, a parameter wider than the value passed)
raises :class:`Unrecordable`, and the hooks skip it with a :class:`CaptureWarning`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import CompileOptions, KernelSource, KernforgeError, LaunchConfig, Param, Variant
from ..core.model import Scalar
from .base import Knob, cached_dtype
from .cxx_names import demangle_simple, instantiated_signature, parse_name_expression

FAST_MATH_FLAGS = {"ftz": "ftz", "prec-div": "prec_div", "prec-sqrt": "prec_sqrt",
                   "fmad": "fmad"}
UNSUPPORTED_FLAGS = ("jitify", "translate_cucomplex", "enable_cooperative_groups")


class Unrecordable(Exception):
    """This kernel or launch cannot be recorded faithfully; the message says why."""


class CaptureWarning(UserWarning):
    """A CuPy kernel or launch was run but not recorded (the application is unaffected)."""


@dataclass(frozen=True)
class MappedOptions:
    knobs: dict[str, Scalar] = field(default_factory=dict)
    defines: dict[str, str] = field(default_factory=dict)
    extra: tuple[str, ...] = ()


def _flag(opt: str) -> tuple[str, str | None]:
    """``--ftz=true`` / ``-ftz=true`` -> ("ftz", "true"); ``--use_fast_math`` -> (.., None)."""
    name, eq, value = opt.lstrip("-").partition("=")
    return name, value if eq else None


def _define(text: str) -> tuple[str, str] | None:
    name, eq, value = text.strip().partition("=")
    return (name, value if eq else "1") if name.isidentifier() else None


def _map_one(opt: str, knobs: Mapping[str, Knob], out: MappedOptions) -> bool:
    """Map ``opt`` onto a knob when the mapping is exact; False when it must stay verbatim."""
    name, value = _flag(opt)
    if name == "maxrregcount" and value is not None and value.isdigit():
        regs = int(value)
        if regs and regs in knobs["maxrregcount"].choices:
            out.knobs["maxrregcount"] = regs
            return True
    elif name == "use_fast_math" and value is None:
        out.knobs["use_fast_math"] = True
        return True
    elif name in FAST_MATH_FLAGS and value in ("true", "false"):
        out.knobs[FAST_MATH_FLAGS[name]] = value == "true"
        return True
    elif name == "extra-device-vectorization" and value is None:
        out.knobs["extra_device_vectorization"] = True
        return True
    elif name == "dopt" and value == "on":
        out.knobs["dopt"] = "on"
        return True
    return False


def _tokens(options: Sequence[str]) -> list[tuple[list[str], str | None]]:
    """(original tokens, define text or None): ``-DX=1``, ``-D X=1``, ``--define-macro=X=1``
    and the two-token forms ``-D``/``--define-macro`` + ``X=1`` carry a define."""
    out: list[tuple[list[str], str | None]] = []
    it = iter(options)
    for opt in it:
        if opt in ("-D", "--define-macro"):
            nxt = next(it, "")
            out.append(([opt, nxt], nxt))
        elif opt.startswith("--define-macro="):
            out.append(([opt], opt[len("--define-macro="):]))
        elif opt.startswith("-D"):
            out.append(([opt], opt[2:]))
        else:
            out.append(([opt], None))
    return out


def map_options(options: Sequence[str], knobs: Sequence[Knob]) -> MappedOptions:
    """Map CuPy options to cuda knobs where the mapping is exact; the rest stays verbatim.

    Exact: ``--maxrregcount=N`` (N one of the knob's choices), ``--use_fast_math``,
    ``--ftz/--prec-div/--prec-sqrt/--fmad=true|false``, ``--extra-device-vectorization``,
    ``-dopt=on`` (one or two leading dashes), ``-D NAME[=VALUE]`` -> defines. When
    ``--use_fast_math`` is combined with an explicit ftz/prec/fmad flag, all of them stay
    verbatim (in their order), since their precedence is NVRTC's business; so do all ``-D``
    when an ``-U`` is present. Later options override earlier ones, as on a command line.
    """
    by_name = {k.name: k for k in knobs}
    out = MappedOptions()
    extra: list[str] = []
    opts = [str(o) for o in options]
    names = [_flag(o)[0] for o in opts]
    fast_mixed = "use_fast_math" in names and any(n in FAST_MATH_FLAGS for n in names)
    undefines = any(o.startswith(("-U", "--undefine-macro")) for o in opts)
    for tokens, define in _tokens(opts):
        parsed = _define(define) if define is not None else None
        if parsed is not None and not undefines:
            out.defines[parsed[0]] = parsed[1]
            continue
        if define is not None:
            extra.extend(tokens)
            continue
        opt = tokens[0]
        fast = _flag(opt)[0] in ("use_fast_math", *FAST_MATH_FLAGS)
        if (fast and fast_mixed) or not _map_one(opt, by_name, out):
            extra.append(opt)
    return MappedOptions(out.knobs, out.defines, tuple(extra))


# ---- kernels --------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelInfo:
    """What does not change between launches of one CuPy kernel."""

    source: KernelSource  # with its resolved signature
    options: CompileOptions  # resolved: every knob present
    defines: tuple[tuple[str, str], ...]
    capture: Mapping[str, Any]
    _variants: dict[LaunchConfig, Variant] = field(default_factory=dict, compare=False,
                                                   repr=False)
    # the CuPy hooks' cache of a deployment's plan for this kernel (cupy_hooks._plan)
    route: list[Any] = field(default_factory=lambda: [None], compare=False, repr=False)

    @property
    def signature(self) -> tuple[Param, ...]:
        assert self.source.signature is not None
        return self.source.signature

    def variant(self, launch: LaunchConfig) -> Variant:
        """The kernel launched with ``launch`` (remembered: a time loop repeats geometries)."""
        hit = self._variants.get(launch)
        if hit is None:
            if len(self._variants) >= 256:
                self._variants.clear()
            hit = self._variants[launch] = Variant(self.source, self.options, launch,
                                                   self.defines)
        return hit


def _entry_and_expression(symbol: str, name_expression: str | None) -> tuple[str, str]:
    """(entry, value of the name_expression knob) of a kernel."""
    if name_expression is not None:
        try:
            expr = parse_name_expression(name_expression)
        except KernforgeError as exc:
            raise Unrecordable(exc.message) from None
        return expr.entry, "" if expr.text == expr.entry else expr.text
    qualified = demangle_simple(symbol)
    if qualified is None:
        raise Unrecordable(f"cannot demangle the symbol {symbol!r} (a template instantiation "
                           "fetched without name_expressions?)")
    entry = qualified.rsplit("::", 1)[-1]
    return entry, "" if qualified == entry else qualified


def describe_kernel(code: str | None, symbol: str, options: Sequence[str], knobs: Sequence[Knob],
                    *, name_expression: str | None = None, compiler: str = "nvrtc",
                    flags: Mapping[str, bool] | None = None,
                    origin: str = "cupy") -> KernelInfo:
    """A CuPy kernel in kernforge terms; raises :class:`Unrecordable` with the reason."""
    if code is None:
        raise Unrecordable("it was loaded from a cubin/PTX file: there is no source to record")
    if compiler != "nvrtc":
        raise Unrecordable(f"it is compiled with {compiler!r}; kernforge replays with NVRTC")
    used = [f for f in UNSUPPORTED_FLAGS if (flags or {}).get(f)]
    if used:
        raise Unrecordable(f"it uses {', '.join(used)}, which kernforge does not replay")
    entry, expr = _entry_and_expression(symbol, name_expression)
    source = KernelSource(code, entry, "cuda")
    try:
        signature = instantiated_signature(source, expr or entry)
    except KernforgeError as exc:
        raise Unrecordable(exc.message) from None
    mapped = map_options(options, knobs)
    values: dict[str, Scalar] = {k.name: k.default for k in knobs}
    values.update(mapped.knobs)
    values.update(extra_options=shlex.join(mapped.extra), name_expression=expr)
    capture = {"origin": origin, "symbol": symbol, "name_expression": name_expression,
               "options": list(options)}
    return KernelInfo(KernelSource(code, entry, "cuda", signature), CompileOptions.of(values),
                      tuple(sorted(mapped.defines.items())), capture)


# ---- launches -------------------------------------------------------------------------------
def passed_scalar(value: Any) -> np.ndarray:
    """What CuPy passes by value for ``value``, as a 0-d array of CuPy's dtype."""
    if isinstance(value, (bool, np.bool_)):
        return np.asarray(value, dtype=np.bool_)
    if isinstance(value, int):
        return np.asarray(value, dtype=np.int64)  # OverflowError beyond int64, as in CuPy
    if isinstance(value, float):
        return np.asarray(value, dtype=np.float64)
    if isinstance(value, complex):
        return np.asarray(value, dtype=np.complex128)
    if isinstance(value, (np.generic, np.ndarray)) and np.size(value) == 1 \
            and np.asarray(value).dtype.kind in "biufc":
        return np.asarray(value).reshape(())
    raise Unrecordable(f"cannot pass a {type(value).__name__} by value")


def widen_scalar(param: Param, value: Any) -> np.generic:
    """The value the kernel reads for scalar ``param``: the low bytes of what CuPy passed."""
    dt = cached_dtype(param.dtype)
    if type(value) is dt.type:  # a numpy scalar of the declared type: read as it is
        return value
    if type(value) is int and dt.kind in "iu" and sys.byteorder == "little":
        # CuPy passes an int as an int64: the low bytes of its two's complement
        if not -(1 << 63) <= value < 1 << 63:
            raise Unrecordable(f"{param.name}={value!r} does not fit in an int64")
        bits = 8 * dt.itemsize
        low = value & ((1 << bits) - 1)
        if dt.kind == "i" and low >> (bits - 1):
            low -= 1 << bits
        return dt.type(low)  # type: ignore[no-any-return]
    try:
        src = passed_scalar(value)
    except OverflowError:
        raise Unrecordable(f"{param.name}={value!r} does not fit in an int64") from None
    if src.dtype == dt:
        return dt.type(src[()])
    if src.dtype.itemsize < dt.itemsize:
        raise Unrecordable(f"parameter {param.name!r} ({param.ctype}) reads {dt.itemsize} bytes "
                           f"but a {src.dtype} of {src.dtype.itemsize} was passed")
    if sys.byteorder != "little":  # pragma: no cover - GPU hosts are little-endian
        raise Unrecordable("scalar widening assumes a little-endian host")
    return np.frombuffer(src.tobytes()[:dt.itemsize], dtype=dt)[0]


def _extent(a: Any) -> tuple[int, int]:
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)
    if ptr is None:
        ptr = a.__array_interface__["data"][0]
    return int(ptr), int(a.nbytes)


def prepare_buffer(param: Param, value: Any, is_buffer: Callable[[Any], bool]) -> Any:
    """The array argument as the kernel sees it: viewed as the pointee dtype if needed."""
    if value is None:
        raise Unrecordable(f"argument {param.name!r} is a null pointer (None)")
    if not is_buffer(value):
        raise Unrecordable(f"argument {param.name!r} ({param.ctype}) is a "
                           f"{type(value).__name__}, not a device array")
    if not value.flags.c_contiguous:
        raise Unrecordable(f"argument {param.name!r} is not C-contiguous")
    if param.dtype == "void":
        return value
    dt = cached_dtype(param.dtype)
    if value.dtype == dt:
        return value
    if value.nbytes % dt.itemsize:
        raise Unrecordable(f"argument {param.name!r} is {value.dtype} of {value.nbytes} bytes, "
                           f"not a whole number of {param.dtype}")
    return value.reshape(-1).view(dt)


def check_overlaps(pairs: Sequence[tuple[Param, Any]]) -> None:
    """Refuse arrays that overlap in memory when one of them may be written."""
    arrays = [(p, *_extent(a)) for p, a in pairs if p.pointer and a.nbytes]
    for i, (p, start, size) in enumerate(arrays):
        for q, start2, size2 in arrays[i + 1:]:
            if start < start2 + size2 and start2 < start + size and not (p.const and q.const):
                raise Unrecordable(f"arguments {p.name!r} and {q.name!r} overlap in memory; a "
                                   "recording stores each buffer separately")


def convert_args(signature: Sequence[Param], args: Sequence[Any],
                 is_buffer: Callable[[Any], bool], *, overlaps: bool = True) -> tuple[Any, ...]:
    """Arguments in signature order, converted as the kernel reads them; ``overlaps``: refuse
    overlapping buffers (a recording stores each buffer separately; a deployment does not)."""
    if len(args) != len(signature):
        raise Unrecordable(f"{len(args)} arguments passed, the signature has {len(signature)}")
    out = tuple(prepare_buffer(p, a, is_buffer) if p.pointer else widen_scalar(p, a)
                for p, a in zip(signature, args))
    if overlaps:
        check_overlaps(list(zip(signature, out)))
    return out


def launch_config(grid: Any, block: Any, shared_mem: Any = 0) -> LaunchConfig:
    """A CuPy launch's geometry (ints or tuples, numpy integers allowed)."""
    def dims(v: Any) -> Any:  # LaunchConfig normalizes 1 to 3 ints
        if type(v) is tuple and all(type(x) is int for x in v):
            return v  # the common case, without numpy
        return (int(v),) if np.ndim(v) == 0 else tuple(int(x) for x in v)
    try:
        return LaunchConfig(grid=dims(grid), block=dims(block), shared_mem=int(shared_mem))
    except (KernforgeError, TypeError, ValueError) as exc:
        raise Unrecordable(f"launch geometry grid={grid!r} block={block!r}: {exc}") from None
