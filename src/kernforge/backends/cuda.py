"""The ``cuda`` backend: CUDA C++ compiled at run time with NVRTC through CuPy.

Knobs map to NVRTC/ptxas options; ``__launch_bounds__``, constant specialization of scalar
arguments and of the block dimensions are source rewrites done on the syntax tree
(:mod:`.rewrite`). Modules are cached in process by variant and on disk by CuPy (keyed by
source, options, architecture and NVRTC version). Device memory holds the buffers; a restore
from a device-resident copy is a device-to-device memcpy; launches are timed with CUDA events;
the L2 is flushed by writing a buffer of twice its size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..core import (
    BackendUnavailableError,
    CompileError,
    ConfigError,
    KernelRuntimeError,
    KernelSource,
    LaunchConfig,
    LaunchError,
    Param,
    Variant,
)
from .base import Backend, Compiled, Knob
from .cuda_tuning import block_is_tunable, block_shapes, coarsen_values, coarsened
from .cupy_hooks import original_class
from .cxx_names import instantiated_signature, parse_name_expression
from .fingerprint import CUDA_SOURCE as FINGERPRINT_SOURCE
from .fingerprint import WORD_DTYPES, word_size
from .nvrtc import knob_flags
from .rewrite import rewrite
from .sanitize import SanitizerRun
from .sanitize_cuda import run_tools
from .signature import parse_signature

HOLD_S = 50e-6  # longer than the host needs to enqueue a launch and an event
SPIN_SOURCE = r"""
__device__ __forceinline__ unsigned long long kf_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void kf_spin(unsigned long long ns) {
    const unsigned long long t0 = kf_now();
    while (kf_now() - t0 < ns) { }
}
"""
REGS = (0, 32, 40, 48, 56, 64, 72, 80, 96, 128, 168, 255)
KNOBS: tuple[Knob, ...] = (
    Knob("maxrregcount", "choice", 0, REGS, doc="--maxrregcount (0 = compiler's choice)"),
    Knob("ftz", "bool", False, doc="--ftz: flush denormals to zero"),
    Knob("prec_div", "bool", True, doc="--prec-div: IEEE division"),
    Knob("prec_sqrt", "bool", True, doc="--prec-sqrt: IEEE square root"),
    Knob("fmad", "bool", True, doc="--fmad: contract multiply-add into FMA"),
    Knob("use_fast_math", "bool", False, needs_tolerance=True,
         doc="--use_fast_math (tolerance mode only)"),
    Knob("extra_device_vectorization", "bool", False,
         doc="--extra-device-vectorization"),
    Knob("dopt", "choice", "default", ("default", "on"),
         doc="-dopt=on (NVRTC accepts no 'off')"),
    Knob("ptxas_opt", "choice", 3, (0, 1, 2, 3), doc="ptxas -O level"),
    Knob("ptxas_dlcm", "choice", "default", ("default", "ca", "cg"),
         doc="ptxas default load cache modifier"),
    Knob("ptxas_dscm", "choice", "default", ("default", "wb", "cg", "cs", "wt"),
         doc="ptxas default store cache modifier"),
    Knob("launch_bounds_max", "int", 0, low=0, high=1024,
         doc="__launch_bounds__ max threads per block (0 = none)"),
    Knob("launch_bounds_min_blocks", "int", 0, low=0, high=32,
         doc="__launch_bounds__ min blocks per SM (0 = none)"),
    Knob("specialize_block", "bool", False,
         doc="compile blockDim.x/y/z as constants of the launch's block"),
    Knob("extra_options", "str", "",
         doc="further NVRTC options, verbatim (shell-quoted, space-separated), "
             "appended after the knobs' options"),
    Knob("name_expression", "str", "",
         doc="C++ name expression of the entry, e.g. scale<float> for a template "
             "instantiation ('' = the entry name)"),
)


def require_cupy(who: str, hint: str) -> Any:
    """CuPy with a visible GPU, else BackendUnavailableError naming ``who`` needs it."""
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # ImportError, or CUDARuntimeError without a GPU
        raise BackendUnavailableError(f"{who} needs CuPy and an NVIDIA GPU ({exc})",
                                      hint=hint) from exc
    return cupy


def _cupy() -> Any:
    return require_cupy("the cuda backend", "install cupy-cuda13x on a machine with a GPU, or "
                                            "use backend='cpu'")


@dataclass
class CudaHandle:
    function: Any
    module: Any
    block: tuple[int, int, int] | None  # compiled-in block dimensions, if specialized
    max_threads: int
    num_regs: int
    local_bytes: int
    dyn_smem_set: int = 0


class CudaBackend(Backend):
    name = "cuda"
    language = "cuda"
    deploy_keys = ("device", "arch")
    sticky_faults = True  # an illegal address or a trap poisons the context

    def sanitize(self, compiled: Compiled, args: Sequence[Any]) -> list[SanitizerRun]:
        """compute-sanitizer memcheck, racecheck, initcheck and synccheck, each once on
        ``args`` in a subprocess (see :mod:`.sanitize_cuda`)."""
        return run_tools(self.name, compiled.variant, args)

    def __init__(self) -> None:
        super().__init__()
        self.cp = _cupy()
        dev = self.cp.cuda.Device()
        self.props = self.cp.cuda.runtime.getDeviceProperties(dev.id)
        self.arch = dev.compute_capability
        self._flush: Any = None
        self._fp: dict[int, Any] = {}
        self._spin: Any = None
        # created on first timing: a process that only plans (a tuner whose candidates run in
        # supervised workers) makes no CUDA context of its own
        self._events: tuple[Any, Any] | None = None
        self.xp = self.cp  # array module for on-device verification

    def tuning_dimensions(self, variant: Variant, preset: str) -> dict[str, tuple[Any, ...]]:
        """quick: block shape, maxrregcount, launch bounds; standard: + constant scalars,
        block specialization, load cache modifier, extra vectorization; full: every knob.
        Block shapes keep the recorded block's dimensionality; the grid is derived."""
        dims = super().tuning_dimensions(variant, preset)
        blocks = (block_shapes(variant.launch.block, preset)
                  if block_is_tunable(variant.source.code, variant.source.entry)
                  else (variant.launch.block,))
        dims.update({"launch.block": blocks,
                     "opt.maxrregcount": (0, 32, 64, 128),
                     "opt.launch_bounds": (False, True),
                     "opt.launch_bounds_min_blocks": (0, 1, 2, 4)})
        if preset in ("standard", "full"):
            dims.update({"const.scalars": (False, True), "opt.specialize_block": (False, True),
                         "opt.ptxas_dlcm": ("default", "ca", "cg"),
                         "opt.extra_device_vectorization": (False, True)})
        if preset == "full":
            dims.update({"opt.maxrregcount": REGS, "opt.ptxas_opt": (3, 2, 1, 0)})
        for name in ("opt.name_expression", "opt.extra_options", "opt.launch_bounds_max"):
            dims.pop(name, None)  # facts of the recording, or derived (below), not searched
        coarsen = coarsen_values(variant)
        if coarsen:
            dims["launch.coarsen_z"] = coarsen
        return self._recorded_first(variant, dims)

    def realize(self, variant: Variant, config: Mapping[str, Any],
                scalars: Mapping[str, Any] | None = None) -> Variant:
        """``opt.launch_bounds`` (a bool) becomes __launch_bounds__ of the chosen block;
        ``launch.coarsen_z`` (see :func:`coarsen_values`) defines ``KF_ZC``, divides the
        grid's z by it after any change of block, and defines ``KF_ZN``, the z extent of the
        launch before (the rewritten kernel stops there)."""
        config = dict(config)
        bounded = config.pop("opt.launch_bounds", None)
        coarsen = config.pop("launch.coarsen_z", None)
        if coarsen is not None:
            config["def.KF_ZC"] = int(coarsen)
        v = super().realize(variant, config, scalars)
        if coarsen is not None and int(coarsen) > 1:  # KF_ZN: the z extent before
            v = v.with_(defines={"KF_ZN": v.launch.grid[2] * v.launch.block[2]},
                        launch=coarsened(v.launch, int(coarsen)))
        if bounded is None:
            return v
        tpb = v.launch.threads_per_block if bounded else 0
        return v.with_(options={"launch_bounds_max": tpb,
                                "launch_bounds_min_blocks":
                                    v.options.get("launch_bounds_min_blocks", 0) if bounded
                                    else 0})

    def knobs(self) -> tuple[Knob, ...]:
        return KNOBS

    def identity(self) -> dict[str, Any]:
        rt = self.cp.cuda.runtime
        name = self.props["name"]
        return {"device": name.decode() if isinstance(name, bytes) else str(name),
                "arch": f"sm_{self.arch}", "sms": self.props.get("multiProcessorCount"),
                "l2_bytes": self.props.get("l2CacheSize"),
                "driver": rt.driverGetVersion(), "runtime": rt.runtimeGetVersion(),
                "nvrtc": ".".join(map(str, self.cp.cuda.nvrtc.getVersion())),
                "cupy": self.cp.__version__, "compiler": "nvrtc"}

    def parse_signature(self, source: KernelSource,
                        defines: Mapping[str, str] | None = None) -> tuple[Param, ...]:
        return parse_signature(source, substitutions=defines)

    def signature_for(self, variant: Variant) -> tuple[Param, ...]:
        expr = variant.options.get("name_expression")
        if variant.source.signature or not expr:
            return super().signature_for(variant)
        return instantiated_signature(variant.source, expr)

    def name_expression(self, variant: Variant) -> str:
        """What NVRTC is asked to instantiate and look up: the knob, else the entry name."""
        expr = variant.options.get("name_expression") or variant.source.entry
        if parse_name_expression(expr).entry != variant.source.entry:
            raise ConfigError(f"name_expression {expr!r} does not name the entry "
                              f"{variant.source.entry!r}",
                              hint="the entry is the base name, e.g. entry scale with "
                                   "name_expression scale<float>")
        return expr

    def is_buffer(self, value: Any) -> bool:
        return isinstance(value, self.cp.ndarray)

    # ---- compile --------------------------------------------------------------------------
    def nvrtc_options(self, variant: Variant) -> tuple[str, ...]:
        return knob_flags(variant.options.as_dict(), variant.defines)

    def final_source(self, variant: Variant, signature: Sequence[Param]) -> str:
        o = variant.options.as_dict()
        bounds = ((int(o["launch_bounds_max"]), int(o["launch_bounds_min_blocks"]))
                  if o["launch_bounds_max"] else None)
        if o["launch_bounds_min_blocks"] and not bounds:
            raise ConfigError("launch_bounds_min_blocks needs launch_bounds_max",
                              hint="set launch_bounds_max too, or leave both at 0")
        block = variant.launch.block if o["specialize_block"] else None
        return rewrite(variant.source, signature, launch_bounds=bounds,
                       constants=dict(variant.constants) or None, block=block)

    def cache_key(self, variant: Variant) -> str:
        if variant.options.get("specialize_block"):
            return replace(variant, launch=LaunchConfig(block=variant.launch.block)).key()
        return super().cache_key(variant)

    def _compile(self, variant: Variant, signature: tuple[Param, ...]) -> tuple[Any, str]:
        code = self.final_source(variant, signature)
        options = self.nvrtc_options(variant)
        entry = variant.source.entry
        expr = self.name_expression(variant)
        try:
            raw_module = original_class(self.cp, "RawModule")  # never the recording hooks
            module = raw_module(code=code, options=options, name_expressions=[expr])
            fn = module.get_function(expr)
        except self.cp.cuda.compiler.CompileException as exc:
            log = str(exc)
            first = "\n".join(log.strip().splitlines()[:8])
            raise CompileError(f"NVRTC could not compile {entry}:\n{first}", log=log) from exc
        except Exception as exc:  # invalid option, module load failure
            raise CompileError(f"could not build {entry}: {type(exc).__name__}: {exc}",
                               log=str(exc)) from exc
        handle = CudaHandle(  # CuPy's RawKernel exposes the function attributes we need
            function=fn, module=module,
            block=variant.launch.block if variant.options.get("specialize_block") else None,
            max_threads=int(fn.max_threads_per_block), num_regs=int(fn.num_regs),
            local_bytes=int(fn.local_size_bytes))
        return handle, " ".join(options)

    def compile(self, variant: Variant, **kw: Any) -> Compiled:
        compiled = super().compile(variant, **kw)
        h = compiled.handle
        compiled.info.update(num_regs=h.num_regs, max_threads=h.max_threads,
                             local_bytes=h.local_bytes)
        return compiled

    # ---- launch ---------------------------------------------------------------------------
    def check_launch(self, launch: LaunchConfig) -> None:
        limit = int(self.props.get("maxThreadsPerBlock", 1024))
        if launch.threads_per_block > limit:
            raise ConfigError(f"block {launch.block} has {launch.threads_per_block} threads; "
                              f"the device allows {limit}", hint="choose a smaller block")
        smem = int(self.props.get("sharedMemPerBlockOptin", 0) or 0)
        if smem and launch.shared_mem > smem:
            raise ConfigError(f"{launch.shared_mem} bytes of dynamic shared memory exceed the "
                              f"device limit of {smem}", hint="request less shared memory")

    def _ready(self, handle: CudaHandle, launch: LaunchConfig) -> None:
        """The checks of a launch that depend only on the kernel and the geometry; raises
        the dynamic shared memory limit of the function when the launch needs more."""
        if handle.block is not None and tuple(launch.block) != handle.block:
            raise ConfigError(f"kernel compiled for block {handle.block}, launched with "
                              f"{launch.block}", hint="recompile with specialize_block for "
                                                      "this block, or turn it off")
        if launch.threads_per_block > handle.max_threads:
            raise LaunchError(f"block of {launch.threads_per_block} threads exceeds this "
                              f"kernel's limit of {handle.max_threads} (registers or "
                              f"launch bounds)", hint="use a smaller block")
        try:
            if launch.shared_mem > 48 * 1024 and handle.dyn_smem_set < launch.shared_mem:
                handle.function.max_dynamic_shared_size_bytes = launch.shared_mem
                handle.dyn_smem_set = launch.shared_mem
        except self.cp.cuda.driver.CUDADriverError as exc:
            raise LaunchError(f"launch failed: {exc}") from exc

    def _launch(self, handle: CudaHandle, args: Sequence[Any], launch: LaunchConfig) -> None:
        self._ready(handle, launch)
        try:
            handle.function(launch.grid, launch.block, tuple(args), shared_mem=launch.shared_mem)
        except self.cp.cuda.driver.CUDADriverError as exc:
            raise LaunchError(f"launch failed: {exc}") from exc

    def prepared_launch(self, compiled: Compiled, launch: LaunchConfig
                        ) -> Callable[[Sequence[Any]], None]:
        """:meth:`launch` for converted arguments, its checks of the kernel and ``launch``
        done once here; per call only CuPy's launch on the current stream (deploy/launcher.py)."""
        self.check_launch(launch)
        self._ready(compiled.handle, launch)
        function, grid, block = compiled.handle.function, launch.grid, launch.block
        shared_mem, driver_error = launch.shared_mem, self.cp.cuda.driver.CUDADriverError

        def fire(args: Sequence[Any]) -> None:
            try:
                function(grid, block, tuple(args), shared_mem=shared_mem)
            except driver_error as exc:
                raise LaunchError(f"launch failed: {exc}") from exc

        return fire

    def synchronize(self) -> None:
        try:
            self.cp.cuda.get_current_stream().synchronize()
        except (self.cp.cuda.driver.CUDADriverError,
                self.cp.cuda.runtime.CUDARuntimeError) as exc:
            raise KernelRuntimeError(f"kernel failed on the device: {exc}",
                                     hint="the CUDA context is unusable after this; restart "
                                          "the process") from exc

    def hold_stream(self, seconds: float = HOLD_S) -> None:
        """Keep the stream busy for ``seconds`` with a one-thread spin kernel, so that what the
        host enqueues next (start event, kernel, end event) is queued before the start event
        is reached: the events then time the kernel alone, not the host's launch overhead."""
        if self._spin is None:
            mod = original_class(self.cp, "RawModule")(code=SPIN_SOURCE)
            self._spin = mod.get_function("kf_spin")
        self._spin((1,), (1,), (np.uint64(seconds * 1e9),))

    def time_run(self, run: Callable[[], None], *, hold_s: float | None = None,
                 what: str = "kernel") -> float:
        """Seconds between CUDA events around the work ``run()`` enqueues on the current
        stream, the stream held ``hold_s`` first (default :data:`HOLD_S`) so that the start
        event, the work and the end event are all queued before the start event is reached."""
        if self._events is None:
            self._events = (self.cp.cuda.Event(), self.cp.cuda.Event())
        start, end = self._events
        self.hold_stream(HOLD_S if hold_s is None else hold_s)
        start.record()
        run()
        end.record()
        try:
            end.synchronize()
        except Exception as exc:
            raise KernelRuntimeError(f"{what} failed on the device: {exc}",
                                     hint="the CUDA context is unusable after this; restart "
                                          "the process") from exc
        return float(self.cp.cuda.get_elapsed_time(start, end)) * 1e-3

    def flush_cache(self) -> None:
        if self._flush is None:
            l2 = int(self.props.get("l2CacheSize", 64 << 20) or (64 << 20))
            self._flush = self.cp.empty(2 * l2 // 4, dtype=self.cp.int32)
        self._flush.fill(0)

    def fingerprints(self, buffers: Sequence[Any]) -> list[tuple[int, int]]:
        """Content fingerprints computed on the device, one kernel per buffer and a single
        8-bytes-per-buffer copy back."""
        cp = self.cp
        if not self._fp:
            mod = original_class(cp, "RawModule")(code=FINGERPRINT_SOURCE)
            self._fp = {w: mod.get_function(f"kf_fp{w}") for w in (8, 4, 2, 1)}
        out = cp.zeros(max(1, len(buffers)), dtype=cp.uint64)
        sizes = []
        sms = int(self.props.get("multiProcessorCount", 132))
        for slot, buffer in enumerate(buffers):
            raw = cp.ascontiguousarray(buffer).reshape(-1).view(cp.uint8)
            w = word_size(raw.size)
            words = raw.view(WORD_DTYPES[w])
            n = int(words.size)
            if n:
                blocks = max(1, min(sms * 8, (n + 255) // 256))
                self._fp[w]((blocks,), (256,), (words, np.uint64(n), out[slot:slot + 1]))
            sizes.append(int(raw.size))
        return [(int(v), size) for v, size in zip(out.get().tolist(), sizes)]

    def fingerprint(self, buffer: Any) -> tuple[int, int]:
        return self.fingerprints([buffer])[0]

    # ---- memory ---------------------------------------------------------------------------
    def to_device(self, array: np.ndarray) -> Any:
        return self.cp.array(array, copy=True, order="C")

    def restore(self, buffer: Any, source: Any) -> None:
        if isinstance(source, self.cp.ndarray):
            buffer.data.copy_from_device_async(source.data, source.nbytes)
        else:
            buffer.set(np.ascontiguousarray(source))

    def to_host(self, buffer: Any) -> np.ndarray:
        return self.cp.asnumpy(buffer) if isinstance(buffer, self.cp.ndarray) \
            else np.array(buffer, copy=True)
