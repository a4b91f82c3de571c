"""Probe a stencil cell on the GPU: its dispatched operator against variants, timed the way the
bench times (L2 flushed and stream held before each run, CUDA events, interleaved passes,
median), every variant checked against the float64 oracle first, % of the harness's copy
bandwidth of the same bytes. For questions a forge round would take longer to answer. The
variants run in a supervised worker process (``--in-process``: in this one, to debug): one that
crashes, hangs or fails to build is reported with its Status and cause, the rest are timed, and
the probe exits 6 (:mod:`kernforge.forge.probe_run`).

    kernforge stencil probe CELL [VARIANT ...] [--passes 25]

A VARIANT is ``k=v,...`` (parameters of the cell's design over the dispatched operator's,
e.g. ``ty=16,tx=64``), optionally followed by one source probe of the plain z-marching kernel
(zmarch; the prefetches with pf=1, ry=1, sc=0; ``zo``/``zr`` without pn/ry/sc/h2/smem; a probe
refuses any other):
  ``+l2=D``   a per-thread ``prefetch.global.L2`` of the plane D planes ahead, each plane
  ``+bl2=D``  one ``cp.async.bulk.prefetch.L2`` of the warp's row, D planes ahead
  ``+zo``     z-chunks fastest in the block order, odd chunks marched downward (mirrored plane
              index, z weights swapped): both chunks that share a z-halo read it at once
  ``+zr``     odd chunks marched downward, the block order kept (chunk layers slowest)
  ``+cl=AXES`` every kernel launched in thread-block clusters (``__cluster_dims__``; any design,
              nothing else changed), e.g. ``cl=y4`` (4 neighbouring tiles along y), ``cl=z2``,
              ``cl=x2y2``: blocks that read each other's halo placed in one GPC
e.g. ``kernforge stencil probe star_2/512x512x512/fp32 pn=0 pn=0+zo pn=0,lz=32+zo``.

A VARIANT may also name a whole operator by its key, ``DESIGN[k=v,...]`` as the forge and the
bench print it (any design; `kernforge.stencil.matrix.from_key`), for a direct interleaved A/B of two designs:
``kernforge stencil probe star_2/1024x1024x32/fp32 'planesweep[ca=1,lz=28,ry=8,st=1,tx=64,ty=4,vx=2]'``.
The operator built must have exactly the key's parameters (a key leaves out those at their
first value), else the probe refuses it.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from ..core import ConfigError
from ..stencil import matrix as mx
from ..stencil.kernels import zmarch
from ..stencil.operator import Operator
from ..stencil.spec import Cell

LOOP = re.compile(r"for \(long z = zb; z < ze; (?:\+\+z|z \+= PF)\) \{\n")  # pf=1: PF is 1


class ProbeError(ConfigError):
    """A probe asked of an operator it cannot rewrite."""

    def __init__(self, message: str, hint: str = "kernforge stencil probe --help lists the "
                 "variants and probes") -> None:
        super().__init__(message, hint=hint)


def _plain(op: Operator, probe: str) -> None:
    """Refuse an operator a probe cannot rewrite: z-marching only, each option as its plain
    kernel has it (:data:`kernforge.stencil.kernels.zmarch.PLAIN`) but those the ``probe``
    (``prefetch`` or ``z_order``) takes at any value (``zmarch.PROBE_FREE``): the prefetches
    need pf=1, ry=1 and sc=0 (their line names the thread's row ``y``); z_order takes any pf
    and xs, but no pn/ry/sc/h2/smem."""
    plain, allow = zmarch.PLAIN, zmarch.PROBE_FREE[probe]
    other = [k for k in plain if k not in allow and op.params.get(k, plain[k]) != plain[k]]
    if op.design != zmarch.DESIGN.name or other:
        fix = ", ".join(f"{k}={plain[k]}" for k in other)
        raise ProbeError(f"{op.key}: this probe rewrites the z-marching kernel only"
                         f"{' with ' + fix if fix else ''}")


def _in_loop(op: Operator, code: str, note: str) -> Operator:
    src, n = LOOP.subn(lambda m: m.group(0) + code, op.source)
    if n != 1:
        raise ProbeError(f"{op.key}: found {n} z loops, expected one")
    return dataclasses.replace(op, source=src, notes=note)


def l2_prefetch(op: Operator, d: int) -> Operator:
    """Each thread prefetches its own points of the plane ``d`` ahead into L2."""
    _plain(op, "prefetch")
    return _in_loop(op, f'    if (z + {d} + R < NZ) asm volatile("prefetch.global.L2 [%0];" :: '
                        f'"l"(src + ((z + {d} + R) * NY + y) * NX + x0));\n', f"l2={d}")


def bulk_prefetch(op: Operator, d: int, itemsize: int) -> Operator:
    """Lane 0 of each warp row prefetches the row ``d`` planes ahead with one bulk request."""
    _plain(op, "prefetch")
    nbytes = zmarch.row_points(op.params) * itemsize
    if nbytes % 16:
        raise ProbeError(f"{op.key}: a bulk prefetch needs a multiple of 16 bytes ({nbytes})")
    return _in_loop(op, f'    if (threadIdx.x == 0 && z + {d} + R < NZ) asm volatile('
                        f'"cp.async.bulk.prefetch.L2.global [%0], %1;" :: '
                        f'"l"(src + ((z + {d} + R) * NY + y) * NX + x0), "r"({nbytes}));\n',
                    f"bl2={d}")


def z_order(op: Operator, remap: bool = True) -> Operator:
    """Odd chunks march downward; with ``remap``, chunks are also fastest in the block order."""
    _plain(op, "z_order")
    s = op.source
    radius = int(re.search(r"constexpr int R = (\d+);", s).group(1))  # type: ignore[union-attr]
    start = re.search(r"__global__ void[^{]*\{\n", s)
    assert start is not None
    body = s[start.end():]
    if remap:
        body = (body.replace("blockIdx.x", "kf_bx").replace("blockIdx.y", "kf_by")
                .replace("blockIdx.z", "kf_ck"))
        head = ("  const unsigned kf_lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * "
                "blockIdx.z);\n"
                "  const unsigned kf_ck = kf_lin % gridDim.z, kf_tl = kf_lin / gridDim.z;\n"
                "  const unsigned kf_bx = kf_tl % gridDim.x, kf_by = kf_tl / gridDim.x;\n"
                "  const bool kf_rev = kf_ck & 1;\n")
    else:
        head = "  const bool kf_rev = blockIdx.z & 1;\n"
    ze = re.search(r"  const long ze = [^\n]*\n", body)
    if ze is None:
        raise ProbeError(f"{op.key}: no z-chunk end in the source")
    body = re.sub(r"\(\(([^()]*)\) \* NY", r"((PZ(\1)) * NY", body)
    body = re.sub(r"\((zz|z) \* NY", r"(PZ(\1) * NY", body)
    # plane offsets from ``base`` (the staged kernels' next coefficient plane) point the other
    # way in a reversed chunk
    body = re.sub(r"base \+ (\d+) \* NY \* NX", r"base + (kf_rev ? -\1L : \1L) * NY * NX", body)
    # in a reversed chunk q[j] holds plane z - (j - R): its weight is q[2R - j]'s
    weights = {int(j): w for w, j in re.findall(r"(W\d+) \* q\[(\d)\]", body)}
    if sorted(weights) != list(range(2 * radius + 1)):
        raise ProbeError(f"{op.key}: z taps {sorted(weights)} are not q[0..{2 * radius}]")
    decl = "  #define PZ(v) (kf_rev ? (zb + ze - 1 - (v)) : (v))\n"
    for j, w in weights.items():
        if j != radius:
            decl += f"  const auto WZ{j} = kf_rev ? {weights[2 * radius - j]} : {w};\n"
            body = re.sub(rf"\b{w} \* q\[{j}\]", f"WZ{j} * q[{j}]", body)
    ze = re.search(r"  const long ze = [^\n]*\n", body)
    assert ze is not None
    body = body[:ze.end()] + decl + body[ze.end():].rstrip()
    if not body.endswith("}"):
        raise ProbeError(f"{op.key}: the kernel is not the source's last definition")
    return dataclasses.replace(op, source=s[:start.end()] + head + body[:-1] + "  #undef PZ\n}\n",
                               notes="zo" if remap else "zr")


def clustered(op: Operator, axes: str) -> Operator:
    """Every kernel of ``op`` with ``__cluster_dims__`` (``axes``: e.g. ``y4``, ``x2y2``);
    each launch's grid must divide by the cluster along every axis (8 blocks at most)."""
    m = re.fullmatch(r"(?:x(\d+))?(?:y(\d+))?(?:z(\d+))?", axes)
    if not axes or m is None:
        raise ProbeError(f"cl={axes!r}: write the cluster as x<N>y<N>z<N> (any of them), e.g. y4")
    dims = tuple(int(v or 1) for v in m.groups())
    if dims[0] * dims[1] * dims[2] > 8:
        raise ProbeError(f"cl={axes}: at most 8 blocks per cluster (portable size)")
    for launch in op.launches:
        if any(g % c for g, c in zip(launch.grid, dims, strict=True)):
            raise ProbeError(f"{op.key}: grid {launch.grid} does not divide by cluster {dims}")
    src, n = re.subn(r"__launch_bounds__\(([^)]*)\)",
                     lambda k: f"{k.group(0)} __cluster_dims__({dims[0]}, {dims[1]}, {dims[2]})",
                     op.source)
    if not n:
        raise ProbeError(f"{op.key}: no __launch_bounds__ to attach the cluster to")
    return dataclasses.replace(op, source=src, notes=f"cl={axes}")


def _ints(params: str, spec: str) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (kv.split("=") for kv in params.split(",") if kv)}
    except ValueError as exc:
        raise ProbeError(f"{spec!r}: parameters are k=v with integer values") from exc


def variant(cell: Cell, spec: str) -> Operator:
    """The operator a VARIANT names (see the module docstring)."""
    base = mx.operator_for(cell)
    params, _, probe = spec.partition("+")
    if "[" in params:  # a whole operator by its key
        try:
            op = mx.from_key(cell, params)
        except ConfigError as exc:
            raise ProbeError(exc.message, hint=exc.hint or "") from None
    else:
        over = _ints(params, spec)
        built = mx.build(base.design, cell, {**base.params, **over})
        if built is None:
            raise ProbeError(f"{spec!r}: {base.design} does not build {cell.id} with {over}")
        op = built
    if not probe:
        return op
    if probe in ("zo", "zr"):
        return z_order(op, remap=probe == "zo")
    kind, _, d = probe.partition("=")
    if kind == "cl":
        return clustered(op, d)
    if kind == "l2" and d.isdigit():
        return l2_prefetch(op, int(d))
    if kind == "bl2" and d.isdigit():
        return bulk_prefetch(op, int(d), cell.precision.itemsize)
    raise ProbeError(f"{probe!r}: the probes are l2=D, bl2=D, zo, zr and cl=AXES")


def run(cell_id: str, variants: Sequence[str] = (), *, passes: int = 25,
        say: Callable[[str], None] = print, isolate: Any = None, device: str | None = None) -> int:
    """Time the cell's dispatched operator against the ``variants`` in ``passes`` interleaved
    passes on the GPU (``device``: the
    ``module:factory`` of another device). With ``isolate`` (the command's supervisor, its
    default) they run in a worker (:mod:`.probe_run`): a variant that crashes, hangs or fails
    to build or run is reported with its Status and cause, the others are timed, exit 6. A
    variant that does not generate or fails the oracle is a :class:`ConfigError`."""
    from . import probe_run
    from .probe_run import ProbeRuns, name_of

    cell = Cell.parse(cell_id)
    ops = [variant(cell, s) for s in ["", *variants]]
    runs = ProbeRuns(cell, isolate, device or probe_run.DEVICE)
    try:
        copy_bps, method = runs.open()
        for i, op in enumerate(ops):
            runs.add(i, op)
        times = runs.time(passes)
    finally:
        runs.close()
    first = min(times, default=None)
    base = statistics.median(times[first]) if first is not None else 0.0
    for i, op in enumerate(ops):
        name = name_of(op)
        if i in times:
            t = statistics.median(times[i])
            say(f"{cell.id:28s} {name:58s} {t * 1e6:10.2f} us "
                f"{100 * cell.compulsory_bytes / t / copy_bps:6.1f}% of copy  {base / t:6.3f}x")
        else:
            lost = runs.lost[i]
            say(f"{cell.id:28s} {name:58s} {lost.status.name} ({lost.cause}): {lost.message}")
    if first is not None and first != 0:
        say(f"{cell.id:28s} ratios against {name_of(ops[first])}: the dispatched operator "
            f"was lost")
    say(f"{cell.id:28s} copy: {method} {copy_bps / 1e9:.0f} GB/s")
    return 6 if runs.lost else 0
