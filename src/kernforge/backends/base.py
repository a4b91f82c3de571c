"""The one small Backend ABC every backend implements, plus the shared work around it.

A backend knows how to compile a :class:`Variant`, move arrays to and from its memory, launch a
compiled kernel and time one launch. Everything shared -- option validation against the
backend's knobs, signature parsing, the in-process compile cache, argument checking and
scalar conversion -- lives here, not in each plugin.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from ..core import (
    ArgumentError,
    CompileOptions,
    ConfigError,
    KernelSource,
    LaunchConfig,
    Param,
    Registry,
    Variant,
)
from .sanitize import SanitizerRun


@dataclass(frozen=True)
class Knob:
    """One compiler/launch knob a backend exposes (the tuner builds search spaces from these).

    ``kind`` is ``"choice"`` (one of ``choices``), ``"bool"``, ``"int"`` (``low..high``) or
    ``"str"`` (any string; free-form, e.g. verbatim compiler options: not a tuning dimension).
    ``needs_tolerance``: the knob may change results bit-for-bit (fast-math), so it is only
    allowed when every written buffer declares a tolerance.
    """

    name: str
    kind: str
    default: Any
    choices: tuple[Any, ...] = ()
    low: int = 0
    high: int = 0
    doc: str = ""
    needs_tolerance: bool = False

    def check(self, value: Any) -> None:
        ok = (
            (self.kind == "choice" and value in self.choices)
            or (self.kind == "bool" and isinstance(value, bool))
            or (self.kind == "int" and isinstance(value, int) and not isinstance(value, bool)
                and self.low <= value <= self.high)
            or (self.kind == "str" and isinstance(value, str))
        )
        if not ok:
            allowed = (", ".join(map(repr, self.choices)) if self.kind == "choice"
                       else "true/false" if self.kind == "bool"
                       else "a string" if self.kind == "str" else f"{self.low}..{self.high}")
            raise ConfigError(f"invalid value {value!r} for option {self.name!r}",
                              hint=f"allowed: {allowed} ({self.doc})")


@dataclass
class Compiled:
    """A compiled variant: the backend's handle plus what it took to build."""

    variant: Variant
    signature: tuple[Param, ...]
    handle: Any
    compile_s: float = 0.0
    log: str = ""
    cached: bool = False
    info: dict[str, Any] = field(default_factory=dict)


class Backend(ABC):
    """Compile, allocate/restore, launch, synchronize, time, read back."""

    name: ClassVar[str]
    language: ClassVar[str]

    def __init__(self) -> None:
        self._cache: dict[str, Compiled] = {}
        self._lock = threading.Lock()

    # ---- what a plugin implements ------------------------------------------------------
    @abstractmethod
    def knobs(self) -> tuple[Knob, ...]:
        """The compile knobs this backend understands."""

    @abstractmethod
    def identity(self) -> dict[str, Any]:
        """Device and compiler identity, stored in recordings and deployment specs."""

    #: the keys of identity() that decide whether a deployed (tuned) variant is valid here
    deploy_keys: ClassVar[tuple[str, ...]] = ("device",)

    def deploy_identity(self) -> dict[str, Any]:
        """identity() restricted to :attr:`deploy_keys` (what a deployment spec must match)."""
        ident = self.identity()
        return {k: ident.get(k) for k in self.deploy_keys}

    @abstractmethod
    def _compile(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[Any, str]:
        """Build the variant; return (handle, compiler log). Raise CompileError on failure."""

    @abstractmethod
    def _launch(self, handle: Any, args: Sequence[Any], launch: LaunchConfig) -> None:
        """Launch (arguments already converted by :meth:`convert_args`)."""

    @abstractmethod
    def to_device(self, array: np.ndarray) -> Any:
        """A new buffer in the backend's memory holding a copy of ``array``."""

    @abstractmethod
    def restore(self, buffer: Any, array: Any) -> None:
        """Overwrite ``buffer`` in place with ``array``: a host array, or a buffer of this
        backend of the same size (GPU backends then copy device-to-device)."""

    @abstractmethod
    def to_host(self, buffer: Any) -> np.ndarray:
        """A host copy of ``buffer`` (or of an application's array argument)."""

    @abstractmethod
    def parse_signature(self, source: KernelSource,
                        defines: Mapping[str, str] | None = None) -> tuple[Param, ...]:
        """The parameters of ``source.entry`` (raise SignatureError if not found)."""

    def is_buffer(self, value: Any) -> bool:
        """True when ``value`` is an array argument this backend can pass to a kernel."""
        return isinstance(value, np.ndarray)

    def synchronize(self) -> None:
        """Wait for all launched work (no-op for synchronous backends)."""

    def time_launch(self, compiled: Compiled, args: Sequence[Any], launch: LaunchConfig) -> float:
        """Seconds taken by one launch (:meth:`time_run` around it); nothing else is timed."""
        conv = self.convert_args(compiled, args)
        return self.time_run(lambda: self._launch(compiled.handle, conv, launch))

    def time_run(self, run: Callable[[], None], *, hold_s: float | None = None,
                 what: str = "kernel") -> float:
        """Seconds of the work ``run()`` issues (one launch, or several: a stencil operator),
        synchronized on both sides by the host clock. ``hold_s`` (how long a device queue is
        held first, see the cuda backend) and ``what`` (the name in a device fault) mean
        nothing to a synchronous backend."""
        self.synchronize()
        t0 = time.perf_counter()
        run()
        self.synchronize()
        return time.perf_counter() - t0

    def flush_cache(self) -> None:
        """Evict the device's last-level cache (default: nothing)."""

    def fingerprints(self, buffers: Sequence[Any]) -> list[tuple[int, int]] | None:
        """Content fingerprints computed where the buffers live (see :mod:`.fingerprint`), or
        None when this backend verifies on the host (the default)."""
        return None

    #: faults that leave the device unusable for the rest of the process (a CUDA context
    #: after an illegal address or a trap): a supervised worker ends itself after one
    sticky_faults: ClassVar[bool] = False

    def sanitize(self, compiled: Compiled, args: Sequence[Any]) -> list[SanitizerRun]:
        """Run ``compiled`` once on ``args`` (signature order: host numpy arrays for
        pointers, values for scalars) under this backend's sanitizers, in subprocesses; []
        when the backend has none (the validation gate then notes that nothing was checked)."""
        return []

    def check_launch(self, launch: LaunchConfig) -> None:
        """Raise ConfigError when ``launch`` is impossible on this device (default: accept)."""

    # ---- shared work --------------------------------------------------------------------
    # ---- tuning: what to search around a recorded variant, and how a point becomes a variant
    PRESETS: ClassVar[tuple[str, ...]] = ("quick", "standard", "full")

    def tuning_dimensions(self, variant: Variant, preset: str) -> dict[str, tuple[Any, ...]]:
        """Dimension name -> values to search around ``variant`` (its own value first).
        Names: ``opt.<knob>``, ``launch.<field>``, ``const.scalars``. The default searches every
        choice/bool knob for "full" and nothing for the smaller presets; backends say more."""
        if preset not in self.PRESETS:
            raise ConfigError(f"unknown tuning preset {preset!r}",
                              hint=f"choose one of: {', '.join(self.PRESETS)}")
        dims: dict[str, tuple[Any, ...]] = {}
        if preset == "full":
            for k in self.knobs():
                if k.kind in ("choice", "bool"):
                    dims[f"opt.{k.name}"] = k.choices if k.kind == "choice" else (False, True)
        return self._recorded_first(variant, dims)

    def _recorded_first(self, variant: Variant, dims: dict[str, tuple[Any, ...]]
                        ) -> dict[str, tuple[Any, ...]]:
        """Each dimension's values with the recorded variant's value first (the baseline)."""
        opts = self.resolve_options(variant.options, tolerant=True).as_dict()
        recorded: dict[str, Any] = {f"opt.{k}": v for k, v in opts.items()}
        recorded.update({"launch.block": variant.launch.block,
                         "launch.threads": variant.launch.threads,
                         "const.scalars": bool(variant.constants)})
        out = {}
        for name, values in dims.items():
            first = recorded.get(name, values[0])
            out[name] = (first, *[v for v in values if v != first])
        return out

    def realize(self, variant: Variant, config: Mapping[str, Any],
                scalars: Mapping[str, Any] | None = None) -> Variant:
        """The variant for one point of the search space: ``opt.*`` options, ``def.*``
        defines, ``launch.*`` geometry (the grid derived from the recorded decomposition),
        ``const.scalars`` (every scalar argument compiled in with its ``scalars`` value)."""
        options = {k[4:]: v for k, v in config.items() if k.startswith("opt.")}
        defines = {k[4:]: v for k, v in config.items() if k.startswith("def.")}
        launch = variant.launch
        if "launch.block" in config and tuple(config["launch.block"]) != launch.block:
            launch = launch.reblocked(config["launch.block"])
        if "launch.threads" in config:
            launch = replace(launch, threads=config["launch.threads"])
        constants = dict(scalars or {}) if config.get("const.scalars") else None
        return variant.with_(options=options, defines=defines, launch=launch,
                             constants=constants)

    def default_options(self) -> CompileOptions:
        return CompileOptions.of({k.name: k.default for k in self.knobs()})

    def resolve_options(self, options: CompileOptions, *, tolerant: bool = False,
                        recorded: CompileOptions | None = None) -> CompileOptions:
        """Defaults filled in, unknown names and bad values refused, tolerance rules applied.

        A knob that may change results bit-for-bit needs ``tolerant`` -- unless its value is
        the ``recorded`` one: the recording was made with it, so bitwise comparison holds."""
        knobs = {k.name: k for k in self.knobs()}
        was = recorded.as_dict() if recorded is not None else {}
        for name, value in options.values:
            if name not in knobs:
                raise ConfigError(f"backend {self.name!r} has no option {name!r}",
                                  hint=f"options are: {', '.join(sorted(knobs))}")
            knobs[name].check(value)
            if knobs[name].needs_tolerance and value not in (False, knobs[name].default) \
                    and not tolerant and was.get(name) != value:
                raise ConfigError(
                    f"option {name}={value!r} can change results bit-for-bit, and the outputs "
                    f"are verified bitwise",
                    hint="declare a tolerance for every written buffer (e.g. --tolerance "
                         "rel:1e-6) to allow it")
        return self.default_options().merged(options)

    def compile(self, variant: Variant, *, tolerant: bool = False,
                recorded: CompileOptions | None = None) -> Compiled:
        """Compile (or fetch from the in-process cache) a variant (see resolve_options)."""
        options = self.resolve_options(variant.options, tolerant=tolerant, recorded=recorded)
        variant = replace(variant, options=options)
        key = self.cache_key(variant)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return Compiled(hit.variant if hit.variant == variant else variant, hit.signature,
                            hit.handle, 0.0, hit.log, True, hit.info)
        signature = self.signature_for(variant)
        t0 = time.perf_counter()
        handle, log = self._compile(variant, signature)
        compiled = Compiled(variant, signature, handle, time.perf_counter() - t0, log)
        with self._lock:
            self._cache[key] = compiled
        return compiled

    def signature_for(self, variant: Variant) -> tuple[Param, ...]:
        """The entry's parameters: the source's own, else parsed with the variant's
        ``#define``s (``-DREAL=float`` changes the type of a ``REAL *``); a backend may also use
        the variant's options, e.g. to resolve a template instantiation."""
        return variant.source.signature or self.parse_signature(variant.source,
                                                                dict(variant.defines))

    def cache_key(self, variant: Variant) -> str:
        """In-process cache key; the launch is not part of it unless a backend says so."""
        return replace(variant, launch=LaunchConfig()).key()

    def convert_args(self, compiled: Compiled, args: Sequence[Any]) -> list[Any]:
        """Check ``args`` against the signature; scalars become numpy scalars of their width."""
        sig = compiled.signature
        if len(args) != len(sig):
            raise ArgumentError(
                f"{compiled.variant.source.entry} takes {len(sig)} arguments, got {len(args)}",
                hint="parameters are: " + ", ".join(f"{p.ctype} {p.name}" for p in sig))
        out: list[Any] = []
        for p, a in zip(sig, args):
            if p.pointer:
                if not self.is_buffer(a):
                    raise ArgumentError(f"argument {p.name!r} ({p.ctype}) needs an array, "
                                        f"got {type(a).__name__}",
                                        hint="pass a C-contiguous array of the pointee type")
                dt = getattr(a, "dtype", None)
                if p.dtype != "void" and (dt is None or dt != cached_dtype(p.dtype)):
                    raise ArgumentError(f"argument {p.name!r} ({p.ctype}) needs dtype "
                                        f"{p.dtype}, got {dt}",
                                        hint=f"convert with .astype({p.dtype!r})")
                flags = getattr(a, "flags", None)  # CuPy makes a new object per access
                if not _contiguous(flags):
                    raise ArgumentError(f"argument {p.name!r} is not C-contiguous",
                                        hint="pass np.ascontiguousarray(...) of it")
                if not p.const and not _writeable(flags):
                    raise ArgumentError(f"argument {p.name!r} ({p.ctype}) may be written by the "
                                        f"kernel, but the array is read-only",
                                        hint="pass a writeable copy, or declare the parameter "
                                             "const")
                out.append(a)
            else:
                if self.is_buffer(a):
                    raise ArgumentError(f"argument {p.name!r} ({p.ctype}) is a scalar, got an array")
                out.append(_scalar(p, a))
        return out

    def launch(self, compiled: Compiled, args: Sequence[Any],
               launch: LaunchConfig | None = None) -> None:
        """Launch a compiled kernel (asynchronous on backends that are)."""
        launch = launch or compiled.variant.launch
        self.check_launch(launch)
        conv = self.convert_args(compiled, args)
        self.check_constants(compiled, conv)
        self._launch(compiled.handle, conv, launch)

    def check_constants(self, compiled: Compiled, args: Sequence[Any]) -> None:
        """Refuse a launch whose runtime scalars differ from the compiled-in constants."""
        if not compiled.variant.constants:
            return
        by_name = {p.name: a for p, a in zip(compiled.signature, args)}
        for name, value in compiled.variant.constants:
            if name not in by_name:
                raise ConfigError(f"constant specialization names {name!r}, which is not a "
                                  f"parameter of {compiled.variant.source.entry}",
                                  hint="specialize scalar parameters by their declared names")
            if by_name[name] != value:
                raise ConfigError(
                    f"{compiled.variant.source.entry} was compiled with {name}={value!r} as a "
                    f"constant, but launched with {name}={by_name[name]!r}",
                    hint="recompile without this constant, or with the launch's value")


_DTYPES: dict[str, np.dtype[Any]] = {}


def cached_dtype(name: str) -> np.dtype[Any]:
    """``np.dtype(name)``, remembered (it is asked for on every launch)."""
    dt = _DTYPES.get(name)
    if dt is None:
        dt = _DTYPES[name] = np.dtype(name)
    return dt


FLOAT32_MAX = float(np.finfo(np.float32).max)
_INT_RANGES = {n: (int(np.iinfo(n).min), int(np.iinfo(n).max)) for n in (
    "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")}


def _scalar(p: Param, a: Any) -> Any:
    """``a`` as a numpy scalar of the declared width; lossy integer conversions are refused.
    Exact fast paths without a floating-point error state: a Python float for ``double`` (or
    ``float`` within range), an in-range Python int (tests/backends/test_scalar.py)."""
    try:
        dt = cached_dtype(p.dtype)
        t, ta = dt.type, type(a)
        if ta is t:  # already a numpy scalar of the declared type
            return a
        if ta is float:
            if t is np.float64 or (t is np.float32 and -FLOAT32_MAX <= a <= FLOAT32_MAX):
                return t(a)
        elif ta is int:
            r = _INT_RANGES.get(p.dtype)
            if r is not None and r[0] <= a <= r[1]:
                return t(a)
        if isinstance(a, (str, bytes)):
            raise TypeError(f"a {type(a).__name__} is not a number")
        if p.dtype == "bool" and a not in (0, 1):  # True/False compare equal to 1/0
            raise ValueError("a bool parameter takes 0/1 or False/True")
        with np.errstate(over="raise"):
            value = np.dtype(p.dtype).type(a)
        if value.dtype.kind in "iu" and value != a:
            raise ValueError(f"it does not fit in {p.dtype} exactly")
        if value.dtype.kind == "f" and not np.isfinite(value) and np.isfinite(a):
            raise ValueError(f"it overflows {p.dtype}")
    except (TypeError, ValueError, OverflowError, FloatingPointError) as exc:
        raise ArgumentError(f"argument {p.name!r} ({p.ctype}) cannot take {a!r}: {exc}",
                            hint=f"pass a number that {p.dtype} represents exactly") from None
    return value


def _writeable(flags: Any) -> bool:
    return bool(getattr(flags, "writeable", True))


def _contiguous(flags: Any) -> bool:
    return bool(getattr(flags, "c_contiguous", True))


BACKENDS: Registry[type[Backend]] = Registry("backend")
BACKENDS.register("cpu", "kernforge.backends.cpu:CpuBackend")
BACKENDS.register("null", "kernforge.backends.null:NullBackend")
BACKENDS.register("cuda", "kernforge.backends.cuda:CudaBackend")

_instances: dict[str, Backend] = {}
_instances_lock = threading.Lock()


def get_backend(name: str | Backend) -> Backend:
    """The process-wide instance of backend ``name`` (so compile caches are shared)."""
    if type(name) is str:  # before the (slower) instance test of an abstract class
        backend = _instances.get(name)  # made already: no lock (a dict read is atomic)
        if backend is not None:
            return backend
    elif isinstance(name, Backend):
        return name
    with _instances_lock:
        if name not in _instances:
            _instances[name] = BACKENDS.get(name)()
        return _instances[name]


def options_from(mapping: Mapping[str, Any] | CompileOptions | None) -> CompileOptions:
    if mapping is None:
        return CompileOptions()
    return mapping if isinstance(mapping, CompileOptions) else CompileOptions.of(mapping)
