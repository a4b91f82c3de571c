"""The CUDA driver API through ctypes: what replaying a native unit needs.

ctypes over ``libcuda.so.1`` rather than cuda-python's bindings or CuPy's driver module: it
needs nothing installed, it exposes exactly the calls used (virtual-memory reservation at a
given address, module loading with JIT options, launches from a raw parameter buffer, events),
and the same code runs against the fake driver of ``kernforge.testing.fakecuda`` in CI, so the
replay path is tested without a GPU. ``KERNFORGE_LIBCUDA`` names another driver library.
"""

from __future__ import annotations

import ctypes as C
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..core import BackendUnavailableError, KernelRuntimeError, LaunchError
from ..core.native import FuncAttrs
from .jit import JIT_OPTIONS

CUdeviceptr = C.c_ulonglong
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE, _PARAM_END = 1, 2, 0
_ATTR = {"cc_major": 75, "cc_minor": 76, "l2_bytes": 38, "sm_count": 16,
         "max_threads_per_block": 1, "pci_bus": 33, "pci_device": 34, "pci_domain": 50}
_FUNC_CARVEOUT = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
GATE_US = float(os.environ.get("KERNFORGE_GATE_US", "200"))
# A kernel that spins on the global timer for its one parameter's nanoseconds.
_GATE_PTX = b"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry kf_gate(.param .u64 ns)
{
  .reg .u64 %a<4>;
  .reg .pred %p;
  ld.param.u64 %a0, [ns];
  mov.u64 %a1, %globaltimer;
SPIN:
  mov.u64 %a2, %globaltimer;
  sub.u64 %a3, %a2, %a1;
  setp.lt.u64 %p, %a3, %a0;
  @%p bra SPIN;
  ret;
}
"""


class _Prop(C.Structure):  # CUmemAllocationProp
    _fields_ = [("type", C.c_int), ("handle_types", C.c_int), ("loc_type", C.c_int),
                ("loc_id", C.c_int), ("win32", C.c_void_p), ("flags", C.c_ubyte * 8)]


class _Access(C.Structure):  # CUmemAccessDesc
    _fields_ = [("loc_type", C.c_int), ("loc_id", C.c_int), ("flags", C.c_int)]


class _LaunchConfig(C.Structure):  # CUlaunchConfig
    _fields_ = [("grid", C.c_uint * 3), ("block", C.c_uint * 3), ("shmem", C.c_uint),
                ("stream", C.c_void_p), ("attrs", C.c_void_p), ("nattrs", C.c_uint)]


class Driver:
    """One device's primary context, opened at construction."""

    def __init__(self, device: int = 0, library: str | None = None) -> None:
        path = library or os.environ.get("KERNFORGE_LIBCUDA") or "libcuda.so.1"
        try:
            self.lib = C.CDLL(path)
        except OSError as exc:
            raise BackendUnavailableError(f"cannot load the CUDA driver ({path}): {exc}",
                                          hint="replaying a native unit needs an NVIDIA GPU "
                                               "and its driver") from None
        self.check(self.lib.cuInit(0), "cuInit")
        self.device = C.c_int()
        self.check(self.lib.cuDeviceGet(C.byref(self.device), device), "cuDeviceGet")
        self.ctx = C.c_void_p()
        self.check(self.lib.cuDevicePrimaryCtxRetain(C.byref(self.ctx), self.device),
                   "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        self.lib.cuMemcpyDtoH_v2.argtypes = [C.c_void_p, CUdeviceptr, C.c_size_t]
        self.lib.cuMemcpyHtoD_v2.argtypes = [CUdeviceptr, C.c_void_p, C.c_size_t]
        self.lib.cuMemsetD8_v2.argtypes = [CUdeviceptr, C.c_ubyte, C.c_size_t]
        self._flush: int | None = None
        self._gate: Any = None
        self._events: tuple[C.c_void_p, C.c_void_p] | None = None
        self.refusals: list[str] = []  # why a range could not be mapped at its address

    # ---- errors --------------------------------------------------------------------------------
    def error_name(self, rc: int) -> str:
        s = C.c_char_p()
        if self.lib.cuGetErrorName(rc, C.byref(s)) == 0 and s.value:
            return s.value.decode()
        return f"CUDA error {rc}"

    def check(self, rc: int, what: str, *, runtime: bool = False) -> None:
        if rc == 0:
            return
        msg = f"{what} failed: {self.error_name(rc)}"
        if runtime:
            raise KernelRuntimeError(msg, hint="the kernel faulted; the context is lost")
        raise LaunchError(msg)

    # ---- device ----------------------------------------------------------------------------------
    def attribute(self, name: str) -> int:
        v = C.c_int()
        self.check(self.lib.cuDeviceGetAttribute(C.byref(v), _ATTR[name], self.device),
                   "cuDeviceGetAttribute")
        return v.value

    def pci_bus(self) -> str:
        """The device's PCI bus id as NVML and nvidia-smi name it (``00000000:1B:00.0``)."""
        return (f"{self.attribute('pci_domain'):08X}:{self.attribute('pci_bus'):02X}:"
                f"{self.attribute('pci_device'):02X}.0")

    def identity(self) -> dict[str, Any]:
        name = C.create_string_buffer(256)
        self.lib.cuDeviceGetName(name, 256, self.device)
        ver = C.c_int()
        self.lib.cuDriverGetVersion(C.byref(ver))
        return {"device": name.value.decode(errors="replace"), "driver_version": ver.value,
                "compute_capability": [self.attribute("cc_major"), self.attribute("cc_minor")]}

    def synchronize(self, what: str = "cuCtxSynchronize") -> None:
        self.check(self.lib.cuCtxSynchronize(), what, runtime=True)

    # ---- memory ----------------------------------------------------------------------------------
    def granularity(self) -> int:
        g = C.c_size_t()
        prop = _Prop(type=1, loc_type=1, loc_id=self.device.value)
        self.check(self.lib.cuMemGetAllocationGranularity(C.byref(g), C.byref(prop), 0),
                   "cuMemGetAllocationGranularity")
        return g.value

    def map_at(self, address: int, size: int) -> int | None:
        """Reserve and map ``size`` bytes at exactly ``address`` (both granule-aligned); the
        address on success, None when the driver cannot give that range."""
        ptr = CUdeviceptr()
        rc = self.lib.cuMemAddressReserve(C.byref(ptr), C.c_size_t(size), C.c_size_t(0),
                                          CUdeviceptr(address), C.c_ulonglong(0))
        if rc != 0:
            self.refusals.append(f"{address:#x}+{size:#x}: {self.error_name(rc)}")
            return None
        if ptr.value != address:
            self.refusals.append(f"{address:#x}+{size:#x}: the driver offered {ptr.value:#x}")
            self.lib.cuMemAddressFree(ptr, C.c_size_t(size))
            return None
        handle = C.c_ulonglong()
        prop = _Prop(type=1, loc_type=1, loc_id=self.device.value)
        self.check(self.lib.cuMemCreate(C.byref(handle), C.c_size_t(size), C.byref(prop),
                                        C.c_ulonglong(0)), "cuMemCreate")
        self.check(self.lib.cuMemMap(ptr, C.c_size_t(size), C.c_size_t(0), handle,
                                     C.c_ulonglong(0)), "cuMemMap")
        access = _Access(loc_type=1, loc_id=self.device.value, flags=3)
        self.check(self.lib.cuMemSetAccess(ptr, C.c_size_t(size), C.byref(access),
                                           C.c_size_t(1)), "cuMemSetAccess")
        return address

    def alloc(self, size: int) -> int:
        ptr = CUdeviceptr()
        self.check(self.lib.cuMemAlloc_v2(C.byref(ptr), C.c_size_t(max(size, 1))), "cuMemAlloc")
        return ptr.value

    def htod(self, address: int, data: Any) -> None:
        buf = memoryview(data).cast("B")
        src = (C.c_char * len(buf)).from_buffer_copy(buf) if buf.readonly else \
            (C.c_char * len(buf)).from_buffer(buf)
        self.check(self.lib.cuMemcpyHtoD_v2(address, src, len(buf)), "cuMemcpyHtoD",
                   runtime=True)

    def dtoh(self, address: int, size: int) -> bytearray:
        out = bytearray(size)
        dst = (C.c_char * size).from_buffer(out) if size else C.c_char_p()
        self.check(self.lib.cuMemcpyDtoH_v2(dst, address, size), "cuMemcpyDtoH", runtime=True)
        return out

    def flush_l2(self) -> None:
        """Write a buffer of twice the L2 size, so no timed run starts with a warm cache."""
        if self._flush is None:
            self._flush_size = max(2 * self.attribute("l2_bytes"), 1 << 20)
            self._flush = self.alloc(self._flush_size)
        self.check(self.lib.cuMemsetD8_v2(self._flush, 0, self._flush_size), "cuMemsetD8")

    # ---- modules and launches --------------------------------------------------------------------
    def load(self, image: bytes, jit: Mapping[str, int] | None = None) -> C.c_void_p:
        jit = dict(jit or {})
        n = len(jit)
        opts = (C.c_int * max(n, 1))(*[JIT_OPTIONS[k] for k in jit])
        vals = (C.c_void_p * max(n, 1))(*[C.c_void_p(int(v)) for v in jit.values()])
        mod = C.c_void_p()
        buf = C.create_string_buffer(image, len(image) + 1)
        self.check(self.lib.cuModuleLoadDataEx(C.byref(mod), buf, n, opts, vals),
                   "cuModuleLoadDataEx")
        return mod

    def function(self, module: C.c_void_p, name: str) -> C.c_void_p:
        fn = C.c_void_p()
        self.check(self.lib.cuModuleGetFunction(C.byref(fn), module, name.encode()),
                   f"cuModuleGetFunction({name})")
        return fn

    def set_carveout(self, fn: C.c_void_p, percent: int) -> None:
        self.check(self.lib.cuFuncSetAttribute(fn, _FUNC_CARVEOUT, percent), "cuFuncSetAttribute")

    def set_func_attrs(self, fn: C.c_void_p, attrs: FuncAttrs, shared_mem: int) -> None:
        """What the recorded program set on the kernel's function (``attrs``), before a launch
        with ``shared_mem`` bytes of dynamic shared memory (above 48 KiB it needs
        MAX_DYNAMIC_SHARED_SIZE_BYTES raised: :meth:`FuncAttrs.for_launch`)."""
        for attr, value in attrs.for_launch(shared_mem):
            self.check(self.lib.cuFuncSetAttribute(fn, attr, value),
                       f"cuFuncSetAttribute(attribute {attr}, {value})")
        if attrs.cache_config is not None:
            self.check(self.lib.cuFuncSetCacheConfig(fn, attrs.cache_config),
                       "cuFuncSetCacheConfig")
        if attrs.shared_config is not None:
            self.check(self.lib.cuFuncSetSharedMemConfig(fn, attrs.shared_config),
                       "cuFuncSetSharedMemConfig")

    def prepare(self, fn: C.c_void_p, grid: Sequence[int], block: Sequence[int], shmem: int,
                params: bytes, attrs: Sequence[bytes] = ()) -> Any:
        """A call that launches ``fn`` with every ctypes argument built beforehand, so the host
        time between it and a preceding event is one driver call."""
        buf = C.create_string_buffer(params, max(len(params), 1))
        size = C.c_size_t(len(params))
        extra = (C.c_void_p * 5)(_PARAM_BUFFER_POINTER, C.cast(buf, C.c_void_p),
                                 _PARAM_BUFFER_SIZE, C.addressof(size), _PARAM_END)
        keep: list[Any] = [buf, size, extra]
        if attrs:
            raw = C.create_string_buffer(b"".join(attrs), 72 * len(attrs))
            cfg = _LaunchConfig((C.c_uint * 3)(*grid), (C.c_uint * 3)(*block), shmem, None,
                                C.cast(raw, C.c_void_p), len(attrs))
            keep += [raw, cfg]
            ex, cfg_ref = self.lib.cuLaunchKernelEx, C.byref(cfg)

            def call() -> int:
                return int(ex(cfg_ref, fn, None, extra))
        else:
            dims = [C.c_uint(v) for v in (*grid, *block, shmem)]
            keep += dims
            lk = self.lib.cuLaunchKernel

            def call() -> int:
                return int(lk(fn, *dims, None, None, extra))
        call.keep = keep  # type: ignore[attr-defined]
        return call

    def launch(self, fn: C.c_void_p, grid: Sequence[int], block: Sequence[int], shmem: int,
               params: bytes, attrs: Sequence[bytes] = ()) -> None:
        self.check(self.prepare(fn, grid, block, shmem, params, attrs)(), "cuLaunchKernel")

    def hold(self, microseconds: float = GATE_US) -> bool:
        """Keep the stream busy for ``microseconds`` with a spinning kernel, so the launches the
        host queues meanwhile start back to back, as in an application, instead of each one
        waiting for the host. False when the driver cannot run the spin kernel (fakes)."""
        if self._gate is None:
            try:
                mod = self.load(_GATE_PTX)
                self._gate = self.function(mod, "kf_gate")
            except (LaunchError, KernelRuntimeError):
                self._gate = False
        if self._gate is False:
            return False
        ns = C.c_ulonglong(int(microseconds * 1000))
        self.check(self.prepare(self._gate, (1, 1, 1), (1, 1, 1), 0, bytes(ns))(),
                   "cuLaunchKernel(kf_gate)")
        return True

    def time_launch(self, fn: C.c_void_p, grid: Sequence[int], block: Sequence[int], shmem: int,
                    params: bytes, attrs: Sequence[bytes] = ()) -> float:
        """Seconds between events around one launch. The launch is prepared first and queued
        behind a spinning kernel, so the events time the kernel, not Python's call into the
        driver."""
        return self.time_calls([self.prepare(fn, grid, block, shmem, params, attrs)])

    def time_calls(self, calls: Sequence[Any]) -> float:
        """Seconds between events around ``calls`` (each one made by :meth:`prepare`), queued
        back to back behind a spinning kernel, as :meth:`time_launch` times one."""
        if self._events is None:
            e0, e1 = C.c_void_p(), C.c_void_p()
            self.check(self.lib.cuEventCreate(C.byref(e0), 0), "cuEventCreate")
            self.check(self.lib.cuEventCreate(C.byref(e1), 0), "cuEventCreate")
            self._events = (e0, e1)
        e0, e1 = self._events
        self.hold()
        self.check(self.lib.cuEventRecord(e0, None), "cuEventRecord")
        rcs = [call() for call in calls]
        self.check(self.lib.cuEventRecord(e1, None), "cuEventRecord")
        for rc in rcs:
            self.check(rc, "cuLaunchKernel")
        self.check(self.lib.cuEventSynchronize(e1), "cuEventSynchronize", runtime=True)
        ms = C.c_float()
        self.check(self.lib.cuEventElapsedTime(C.byref(ms), e0, e1), "cuEventElapsedTime")
        return ms.value / 1e3
