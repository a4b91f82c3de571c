"""Re-verification in the deploying process: before a tuned variant replaces the first launch
of its kernel, it runs once on copies of that launch's arguments beside the original kernel
(on other copies), and every array's outputs are compared, bitwise unless the application
declared a tolerance for the buffer.

This is the check a spec's checksum cannot make: a spec exported from a tampered result, one
made by hand, or a variant that behaves differently on this machine's data is caught on the
application's own inputs, and the original kernel runs instead. When the check is impossible
for a launch (an argument that cannot be copied, arguments sharing memory, whose copies would
not), :class:`Unverifiable` says why; the deployment then leaves the entry out unless told to
deploy unverifiable entries (``KERNFORGE_DEPLOY_VERIFY=unverifiable``, ``kernforge run
--allow-unverifiable``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..backends import Backend, Compiled
from ..core import KernforgeError, LaunchConfig, Tolerance, Variant

VERIFY_ENV = "KERNFORGE_DEPLOY_VERIFY"
MODES = ("require", "unverifiable", "off")


class Unverifiable(KernforgeError):
    """The outputs of this launch cannot be compared (the message says why)."""


def verify_mode(mode: str | None = None) -> str:
    """``require`` (default): verify, leave out what cannot be verified; ``unverifiable``:
    verify, deploy what cannot be verified; ``off``: no check (the library's tests)."""
    value = mode if mode is not None else os.environ.get(VERIFY_ENV, "require")
    value = {"1": "require", "0": "off", "": "require"}.get(value, value)
    if value not in MODES:
        raise KernforgeError(f"{VERIFY_ENV}={value!r} is not one of {', '.join(MODES)}",
                             hint=f"unset {VERIFY_ENV}, or set it to require or unverifiable")
    return value


def _overlap(be: Backend, arrays: Sequence[Any]) -> bool:
    hosts = [a for a in arrays if isinstance(a, np.ndarray)]
    for i, a in enumerate(hosts):
        for b in hosts[i + 1:]:
            if np.shares_memory(a, b):
                return True
    ptrs = []
    for a in arrays:
        data = getattr(a, "data", None)
        ptr = getattr(data, "ptr", None)
        if isinstance(ptr, int):
            ptrs.append((ptr, ptr + int(getattr(a, "nbytes", 0))))
    ptrs.sort()
    return any(ptrs[i][1] > ptrs[i + 1][0] for i in range(len(ptrs) - 1))


def _copies(be: Backend, args: Sequence[Any]) -> list[Any]:
    out = []
    for i, a in enumerate(args):
        if not be.is_buffer(a):
            out.append(a)
            continue
        try:
            out.append(be.to_device(be.to_host(a)))
        except Exception as exc:  # noqa: BLE001 - then the check is impossible: say why
            raise Unverifiable(f"argument {i} cannot be copied ({type(exc).__name__}: "
                               f"{exc})") from None
    return out


def _differs(name: str, ref: np.ndarray, out: np.ndarray, tol: Tolerance) -> str | None:
    if ref.shape != out.shape or ref.dtype != out.dtype:
        return f"{name}: shape or dtype changed"
    if tol.exact or ref.dtype.kind not in "fc":
        if ref.tobytes() == out.tobytes():
            return None
        bad = int(np.count_nonzero(ref.view(np.uint8) != out.view(np.uint8)))
        return f"{name}: {bad} byte(s) differ (bitwise)"
    r, o = ref.astype(np.float64), out.astype(np.float64)
    both_nan = np.isnan(r) & np.isnan(o) if tol.nan == "match" else np.zeros(r.shape, bool)
    diff = np.where(both_nan, 0.0, np.abs(o - r))
    if tol.mode == "norm":
        ref_norm = float(np.linalg.norm(np.where(both_nan, 0.0, r)))
        err = float(np.linalg.norm(diff)) / ref_norm if ref_norm else float(np.max(diff))
        ok = bool(np.isfinite(err)) and err <= tol.tol
        return None if ok else f"{name}: relative norm error {err:.3g} > {tol.tol:g}"
    bound = tol.atol + (tol.rtol * np.abs(r) if tol.mode == "rel" else 0.0)
    ok_all = bool(np.all(np.isfinite(diff) & (diff <= bound)))
    return None if ok_all else f"{name}: max |error| {float(np.nanmax(diff)):.3g} beyond " \
                               f"{tol.mode} tolerance"


def reverify(be: Backend, original: Variant, tuned: Compiled, launch: LaunchConfig,
             args: Sequence[Any], names: Sequence[str],
             tolerance: dict[str, Tolerance]) -> str | None:
    """Run ``original`` and ``tuned`` on copies of ``args``; None when every array's outputs
    agree, else what differs. Raises :class:`Unverifiable` when the comparison is
    impossible for these arguments."""
    arrays = [a for a in args if be.is_buffer(a)]
    if not arrays:
        raise Unverifiable("the launch has no array argument to compare")
    if _overlap(be, arrays):
        raise Unverifiable("array arguments share memory, which copies would not")
    ref_compiled = be.compile(original, tolerant=True)  # the application chose its options
    ref_args, out_args = _copies(be, args), _copies(be, args)
    be.launch(ref_compiled, ref_args, original.launch)
    be.launch(tuned, out_args, launch)
    be.synchronize()
    for i, (a, b) in enumerate(zip(ref_args, out_args)):
        if not be.is_buffer(a):
            continue
        name = names[i] if i < len(names) else f"argument {i}"
        why = _differs(name, be.to_host(a), be.to_host(b), tolerance.get(name, Tolerance()))
        if why is not None:
            return why
    return None
