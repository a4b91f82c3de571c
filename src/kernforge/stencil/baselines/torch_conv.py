"""PyTorch ``conv3d`` baseline: what a user of PyTorch would write for each stencil kind.

- The stencil's weights become a ``(1, 1, 2r+1, 2r+1, 2r+1)`` kernel with
  ``K[dz+r, dy+r, dx+r] = w(dz, dy, dx)``: ``conv3d`` is a cross-correlation, so with
  ``padding=0`` output ``(z, y, x)`` is grid point ``(z+r, y+r, x+r)`` (the interior).
  Star stencils are a full 3-D kernel with zeros off the axes.
- varcoeff: a conv of the 6 neighbours (zero center), then ``w0*in + coef*conv`` with
  elementwise ops (``torch.addcmul``) on the interior views.
- Temporal (``star_1_t4``): ``steps`` convs; each intermediate result is copied back into the
  interior of a full-grid scratch buffer whose boundary is the input's (refreshed from ``in`` at
  every run, six face copies, so inputs may change in place between runs); the last step's conv
  is the output.
- fp16 runs a half conv (cuDNN accumulates in fp32), fp64 a double conv. TF32 is switched off
  for convolutions (it would miss the fp32 gate); ``cudnn.benchmark`` is on and the runner warms
  up so cuDNN has picked its algorithm before anything is timed.

Inputs: CuPy arrays (taken zero-copy through DLPack), torch tensors, or numpy arrays (CPU runs,
used by the tests). ``run()`` enqueues on the CUDA stream that is current in CuPy (torch's own
stream when CuPy is not in use); output region: the interior.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core import BackendUnavailableError
from ..spec import Cell, StencilSpec
from ._arrays import inputs_by_role


def kernel_array(spec: StencilSpec, *, drop_center: bool = False) -> np.ndarray:
    """The float64 ``(2r+1,)*3`` correlation kernel: ``K[dz+r, dy+r, dx+r] = w(dz, dy, dx)``."""
    r = spec.radius
    k = np.zeros((2 * r + 1,) * 3, dtype=np.float64)
    for w, (dz, dy, dx) in zip(spec.weights, spec.offsets, strict=True):
        k[dz + r, dy + r, dx + r] = w
    if drop_center:
        k[r, r, r] = 0.0
    return k


def import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise BackendUnavailableError(
            "the PyTorch baseline needs torch",
            hint="pip install torch (CUDA build on the GPU machine)") from exc
    return torch


def _as_tensor(torch: Any, arr: Any) -> Any:
    mod = type(arr).__module__
    if mod.startswith("torch"):
        return arr
    if mod.startswith("cupy"):
        return torch.from_dlpack(arr)  # zero-copy
    return torch.from_numpy(np.ascontiguousarray(arr))


def _configure(torch: Any) -> None:
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    conv = getattr(torch.backends.cudnn, "conv", None)
    if conv is not None and hasattr(conv, "fp32_precision"):
        conv.fp32_precision = "ieee"


class TorchConvRunner:
    """Applies one cell's stencil with ``torch.nn.functional.conv3d`` (see the module doc)."""

    name = "torch"
    synchronous = False
    output_region = "interior"

    def __init__(self, cell: Cell, arrays: Any, *, warmup: int = 3) -> None:
        torch = import_torch()
        _configure(torch)
        self._torch = torch
        self._F = torch.nn.functional
        self.cell = cell
        inputs = inputs_by_role(cell, arrays)
        kinds = {type(a).__module__.split(".")[0] for a in inputs.values()}
        self._cupy_inputs = "cupy" in kinds
        self._numpy_inputs = kinds == {"numpy"}
        t = {role: _as_tensor(torch, a) for role, a in inputs.items()}
        x = t["in"]
        self.device = x.device
        nz, ny, nx = cell.shape.array_shape
        r = cell.radius
        self._r = r
        self._x = x.view(1, 1, nz, ny, nx)
        kind = cell.stencil.kind
        k = kernel_array(cell.stencil, drop_center=kind == "varcoeff")
        self._w = torch.from_numpy(k).to(device=self.device, dtype=x.dtype).view(1, 1, *k.shape)
        if kind == "varcoeff":
            interior = (slice(r, nz - r), slice(r, ny - r), slice(r, nx - r))
            self._in_int = x[interior]
            self._coef_int = t["coef"][interior]
            self._w0 = float(cell.stencil.weights[0])
        self._scratch: Any = None
        if cell.stencil.temporal:
            # two full grids stacked: faces refreshed in one copy each per run
            self._scratch = torch.empty((2, nz, ny, nx), dtype=x.dtype, device=self.device)
        self._result: Any = None
        self._ext_streams: dict[int, Any] = {}
        self.info: dict[str, Any] = {"kernel": f"conv3d {k.shape}", "device": str(self.device),
                                     "cudnn_benchmark": True, "tf32": False}
        for _ in range(max(warmup, 0)):
            self.run()
        self._sync()

    # -- the Runner protocol ------------------------------------------------------------------
    def run(self) -> None:
        if self._cupy_inputs and self.device.type == "cuda":
            import cupy

            ptr = int(cupy.cuda.get_current_stream().ptr)
            if ptr:
                stream = self._ext_streams.get(ptr)
                if stream is None:
                    stream = self._torch.cuda.ExternalStream(ptr, device=self.device)
                    self._ext_streams[ptr] = stream
                with self._torch.cuda.stream(stream):
                    self._apply()
                return
        self._apply()

    def output(self) -> Any:
        """The interior, ``(nz-2r, ny-2r, nx-2r)``, as the inputs' kind of array: CuPy (zero-copy
        through DLPack), a torch tensor, or numpy."""
        self._sync()
        res = self._result
        if self._cupy_inputs:
            import cupy

            return cupy.from_dlpack(res)
        if self._numpy_inputs:
            return res.numpy()
        return res

    # -- internals -----------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def _conv(self, grid5d: Any) -> Any:
        return self._F.conv3d(grid5d, self._w)[0, 0]

    def _apply(self) -> None:
        kind = self.cell.stencil.kind
        if kind == "varcoeff":
            s = self._conv(self._x)
            self._result = self._torch.addcmul(self._in_int * self._w0, self._coef_int, s)
        elif self._scratch is None:
            self._result = self._conv(self._x)
        else:
            self._result = self._temporal()

    def _temporal(self) -> Any:
        r = self._r
        buf = self._scratch
        x = self._x[0, 0]
        # Dirichlet ring: both scratch grids get the input's boundary faces (r thick)
        buf[:, :r] = x[:r]
        buf[:, -r:] = x[-r:]
        buf[:, :, :r] = x[:, :r]
        buf[:, :, -r:] = x[:, -r:]
        buf[:, :, :, :r] = x[:, :, :r]
        buf[:, :, :, -r:] = x[:, :, -r:]
        cur = self._x
        steps = self.cell.stencil.steps
        for s in range(steps - 1):
            nxt = buf[s % 2]
            nxt[r:-r, r:-r, r:-r] = self._conv(cur)
            cur = nxt[None, None]
        return self._conv(cur)
