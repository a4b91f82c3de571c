"""Re-verification in the deploying process: the first launch that an entry would replace runs
the tuned variant on a copy of its arguments and then the application's own (original) launch
on the arguments themselves, and every array is compared, bitwise unless the application
declared a tolerance for the buffer. That launch's results are the original kernel's; the
launches after it run the tuned variant when the two agreed. The cost, once per entry and
process: one copy of the arguments, one extra launch and a comparison.

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..backends import Backend, Compiled
from ..core import KernforgeError, LaunchConfig, Tolerance

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
    """One copy of every array argument, in the backend's memory (``.copy()``: NumPy and
    CuPy arrays copy in place; else through the host)."""
    out = []
    for i, a in enumerate(args):
        if not be.is_buffer(a):
            out.append(a)
            continue
        try:
            out.append(a.copy() if hasattr(a, "copy") else be.to_device(be.to_host(a)))
        except Exception as exc:  # noqa: BLE001 - then the check is impossible: say why
            raise Unverifiable(f"argument {i} cannot be copied ({type(exc).__name__}: "
                               f"{exc})") from None
    return out


def _host(be: Backend, a: Any) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else be.to_host(a)


def _differs(name: str, ref: np.ndarray, out: np.ndarray, tol: Tolerance) -> str | None:
    if ref.shape != out.shape or ref.dtype != out.dtype:
        return f"{name}: shape or dtype changed"
    if tol.exact or ref.dtype.kind not in "fc":
        a, b = np.ascontiguousarray(ref).view(np.uint8), np.ascontiguousarray(out).view(np.uint8)
        if np.array_equal(a, b):
            return None
        return f"{name}: {int(np.count_nonzero(a != b))} byte(s) differ (bitwise)"
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


class VariantFailed(KernforgeError):
    """The tuned variant failed to run on the copies (the message says how)."""


def reverify(be: Backend, tuned: Compiled, launch: LaunchConfig, args: Sequence[Any],
             names: Sequence[str], tolerance: dict[str, Tolerance],
             original: Callable[[], Any]) -> tuple[str | None, Any]:
    """The first launch of a tuned kernel: ``tuned`` runs on a copy of ``args`` (taken before
    anything runs), then ``original()`` -- the application's own launch, on its own
    arguments, so this launch's results are the original kernel's -- and every array is
    compared. Returns (None when they agree, else what differs; ``original()``'s result).
    Raises :class:`Unverifiable` when the comparison is impossible and :class:`VariantFailed`
    when the tuned variant fails, both before ``original()`` ran; an exception of
    ``original()`` itself is the application's and propagates."""
    arrays = [a for a in args if be.is_buffer(a)]
    if not arrays:
        raise Unverifiable("the launch has no array argument to compare")
    if _overlap(be, arrays):
        raise Unverifiable("array arguments share memory, which copies would not")
    out_args = _copies(be, args)
    try:
        be.launch(tuned, out_args, launch)
        be.synchronize()
    except Exception as exc:  # noqa: BLE001 - reported, then the original runs
        raise VariantFailed(f"the tuned variant failed on a copy of the arguments "
                            f"({type(exc).__name__}: {exc})") from None
    result = original()
    be.synchronize()
    same = _same_on_device(be, args, out_args)
    for i, (a, b) in enumerate(zip(args, out_args)):
        if not be.is_buffer(a) or i in same:
            continue
        name = names[i] if i < len(names) else f"argument {i}"
        why = _differs(name, _host(be, a), _host(be, b), tolerance.get(name, Tolerance()))
        if why is not None:
            return why, result
    return None, result


def _same_on_device(be: Backend, args: Sequence[Any], out_args: Sequence[Any]) -> set[int]:
    """The argument positions whose two arrays have equal content fingerprints where they
    live (:meth:`Backend.fingerprints`): bitwise equal without a copy to the host, which for
    large arrays costs more than the application's whole GPU work. Anything else (no device
    fingerprints, a fingerprint that differs) is compared on the host with its tolerance."""
    pos = [i for i, a in enumerate(args) if be.is_buffer(a)]
    try:
        fps = be.fingerprints([args[i] for i in pos] + [out_args[i] for i in pos])
    except Exception:  # noqa: BLE001 - the host comparison decides
        return set()
    if fps is None or len(fps) != 2 * len(pos):
        return set()
    return {i for k, i in enumerate(pos) if fps[k] == fps[len(pos) + k]}
