"""What each forge change tries, in words: the idea log's and the performance log's text, and
the names ``--changes`` accepts (``loop.round_plan`` checks them here with :func:`known`).

The TPE round's seed is a parameter of the round (``forge/bo.py``: ``tpe_round(..., seed)``),
spelt in its name on the command line: ``tpe`` is seed 1, ``tpeN`` (N >= 2) seed N, the same
search seeded apart (by the cell's id and the seed), so a run from an unchanged incumbent asks
other points of the same space. :func:`tpe_seed` and :func:`tpe_name` convert between the two.
"""

from __future__ import annotations

import re

from ..core import ConfigError

_TPE = re.compile(r"tpe([2-9]|[1-9][0-9]+)?")


def is_tpe(change: str) -> bool:
    """``tpe`` or ``tpeN`` for a seed N >= 2."""
    return _TPE.fullmatch(change) is not None


def tpe_seed(change: str) -> int | None:
    """The seed of a TPE round's name (``tpe``: 1, ``tpeN``: N); None for any other change."""
    m = _TPE.fullmatch(change)
    return None if m is None else int(m.group(1) or 1)


def tpe_name(seed: int) -> str:
    """The round name of a TPE seed, as ``--changes`` spells it (the inverse of
    :func:`tpe_seed`)."""
    if type(seed) is not int or seed < 1:
        raise ConfigError(f"TPE seed {seed!r}: a whole number >= 1",
                          hint="tpe is seed 1, tpeN seed N (N >= 2)")
    return "tpe" if seed == 1 else f"tpe{seed}"


def known(change: str) -> bool:
    """A name ``--changes`` accepts: a parameter of some design, a round kind, or a TPE seed."""
    return change in IDEAS or is_tpe(change)


def describe(change: str) -> str:
    """The idea log's words for a change."""
    if change in IDEAS:
        return IDEAS[change]
    seed = tpe_seed(change)
    if seed is not None and seed > 1:
        return f"the tpe round with seed {seed}: other points of the same space"
    return change


def names() -> str:
    """The accepted names, for a hint."""
    return ", ".join([*IDEAS, "tpeN (N >= 2: another seed)"])


IDEAS = {
    "design": "restructure: z-marching with a register queue (star), shared-memory plane sweep "
              "with register-blocked accumulators (box), 2.5D temporal blocking (multi-step)",
    "vx": "vector width: more x points per thread, wider aligned loads and stores",
    "lz": "z-chunk length: more blocks in flight vs. halo planes re-read per chunk",
    "ty": "block height: occupancy and y-halo reuse",
    "tx": "block width: row length per warp and x-halo share",
    "ry": "register blocking along y: fewer shared-memory reads per output (plane sweep); "
          "z-marching: rows per thread, y neighbours from the own queues (fewer L1/L2 "
          "requests per output)",
    "sc": "z-marching, plane sweep, ztile: streaming stores (st.global.cs, evict-first) so "
          "output lines do not displace input planes still read from L2",
    "block": "thread-block shape of the one-thread-per-point kernel",
    "h2": "fp16: __half2 arithmetic (HFMA2); plane sweep: vertical output pairs, per-plane "
          "partial sums added into fp32 accumulators; z-marching and ztile: lane pairs, fp16 sums",
    "pipe": "temporal: uniform stages statically unrolled (no range predicates, no moves)",
    "pf": "planes in flight per thread (a register ring): more bytes in flight per SM",
    "smem": "z-marching: stage each plane's tile in shared memory (2.5D) for x/y neighbours",
    "cx": "temporal: x points per thread (register blocking, wider loads, smaller halo share)",
    "cy": "temporal: y points per thread (register blocking, fewer shared-memory reads)",
    "minb": "temporal, zbox, plane sweep: minimum resident blocks per SM (__launch_bounds__ "
            "register cap: occupancy bought with registers, spills beyond the cap)",
    "fs": "temporal: steps fused per launch (smaller halo, more DRAM traffic)",
    "fi": "temporal (pipelined): a copy of the loop body without the boundary selects, run by "
          "blocks and iteration groups that touch no boundary (a fifth to a half fewer SASS "
          "instructions there)",
    "xs": "z-marching: the x halo from the neighbouring lanes by warp shuffles (fewer L1/L2 "
          "requests per point: the star kernels are L2-throughput-bound on the H200)",
    "pn": "z-marching: the x/y neighbours of the next plane loaded during this one (latency "
          "of L1 misses off the critical path; more registers)",
    "cw": "plane sweep and z-marching, fp64: weights in constant memory (a DFMA takes no "
          "64-bit immediate: two moves per FMA with literal weights)",
    "st": "ztile, plane sweep: planes requested ahead by asynchronous copies into a "
          "shared-memory ring (plane sweep: st=0 is its synchronous staging)",
    "ca": "ztile, plane sweep: the asynchronous copies cached in L1 as well (cp.async.ca, not "
          ".cg), so a neighbouring block on the same SM may find the shared halo rows and "
          "planes there",
    "l1": "z-marching, zbox, plane sweep, ztile: the largest L1 (shared-memory carveout 0%): more of "
          "the neighbour rows hit in L1, fewer requests to the L2 (whose partition link bounds "
          "the star kernels on the H200)",
    "l2p": "plane sweep, ztile, z-marching, zbox: an L2 prefetch size on the plane loads or "
           "copies (.L2::128B, .L2::256B): on a miss the L2 fetches the aligned 128/256 bytes "
           "from DRAM, so a row's later sectors are requested with its first (more bytes in "
           "flight per load)",
    "zo": "launch order: z-chunks first (grid z, x, y), so the blocks that share a column's "
          "halo planes run together and meet in the L2 instead of a plane of tiles apart",
    "pairs": "two parameters changed at once (vector width, z-chunk, block shape, planes in "
             "flight, loads ahead, rows per thread): out of one-change local optima",
    "pairs2": "the next 40 two-parameter changes in the pair round's fixed order",
    "tpe": "Bayesian optimization (TPE) over every parameter of the incumbent's design at once, "
           "3 batches of 16 per cell; the fastest two screened go through the gate",
    "pw": "zbox: the warm-up planes peeled into their own loop (the steady loop stores without "
          "a test; fewer instructions per plane, more registers)",
}
