"""The emulator's oracle cases of every stencil design (tests/stencil/test_designs.py): design,
parameters and precision per case, parameters away from the defaults so more than one code path
per design runs."""

from __future__ import annotations

CASES = [
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 4}, "fp32"),
    ("star_1", "zmarch", {"tx": 8, "ty": 2, "vx": 8, "lz": 5}, "fp16"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3}, "fp64"),
    ("star_2", "planesweep", {"tx": 8, "ty": 2, "vx": 2, "ry": 8, "lz": 5}, "fp32"),
    ("box_1", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4}, "fp16"),
    ("box_1", "planesweep", {"tx": 16, "ty": 2, "vx": 2, "ry": 4, "lz": 0}, "fp64"),
    ("box_2", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4}, "fp32"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 4}, "fp32"),
    ("varcoeff_star_1", "naive", {"block": (8, 4, 2)}, "fp16"),
    ("star_1_t4", "temporal", {"tx": 16, "ty": 16, "lz": 7}, "fp32"),
    ("star_1_t4", "temporal", {"tx": 32, "ty": 12, "lz": 0}, "fp64"),
    ("star_1_t4", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6}, "fp16"),
    ("star_1_t4", "naive", {"block": (16, 4, 2)}, "fp32"),
    # later parameters: prefetch ring, staged plane (zmarch); pipelined stages, register
    # blocking, launch bounds, split fusion (temporal); both x-aligned and partial vectors
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "pf": 2}, "fp32"),
    ("star_1", "zmarch", {"tx": 8, "ty": 2, "vx": 8, "lz": 5, "smem": 1}, "fp16"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "pf": 3, "smem": 1}, "fp64"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "pf": 4}, "fp16"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "pf": 2, "smem": 1},
     "fp32"),
    ("star_1_t4", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "smem": 1}, "fp16"),
    ("star_1_t4", "temporal", {"tx": 16, "ty": 16, "lz": 7, "pipe": 1, "pf": 2}, "fp32"),
    ("star_1_t4", "temporal", {"tx": 4, "ty": 16, "lz": 0, "pipe": 1, "cx": 4, "pf": 3}, "fp64"),
    ("star_1_t4", "temporal", {"tx": 8, "ty": 8, "lz": 5, "pipe": 1, "cx": 2, "cy": 2, "pf": 4,
                               "minb": 2}, "fp16"),
    ("star_1_t4", "temporal", {"tx": 16, "ty": 8, "lz": 6, "pipe": 1, "cy": 2, "fs": 2},
     "fp32"),
    ("star_1_t4", "temporal", {"tx": 16, "ty": 12, "lz": 4, "fs": 2, "minb": 2}, "fp16"),
    # half2 partial sums over vertical output pairs (fp16 plane sweep)
    ("box_1", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "h2": 1}, "fp16"),
    ("box_2", "planesweep", {"tx": 8, "ty": 2, "vx": 2, "ry": 4, "lz": 5, "h2": 1}, "fp16"),
    ("star_2", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 4, "lz": 0, "h2": 1}, "fp16"),
    # the x halo by warp shuffles: rows narrower than a warp (tx 8), a warp per row, two warps
    # per row (tx 64), prefetch ring, radius 2, varcoeff, temporal chain
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "xs": 1}, "fp32"),
    ("star_2", "zmarch", {"tx": 32, "ty": 2, "vx": 2, "lz": 5, "pf": 2, "xs": 1}, "fp16"),
    ("star_1", "zmarch", {"tx": 64, "ty": 2, "vx": 1, "lz": 0, "xs": 1}, "fp64"),
    ("varcoeff_star_1", "zmarch", {"tx": 16, "ty": 4, "vx": 2, "lz": 6, "pf": 3, "xs": 1},
     "fp32"),
    ("star_1_t4", "zmarch", {"tx": 8, "ty": 4, "vx": 8, "lz": 5, "xs": 1}, "fp16"),
    # the x and y neighbours loaded one plane ahead: alone, with the prefetch ring, with the
    # shuffled x halo, radius 2, varcoeff, temporal chain, whole-interior chunk
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "pn": 1}, "fp32"),
    ("star_1", "zmarch", {"tx": 8, "ty": 2, "vx": 8, "lz": 5, "pf": 2, "pn": 1}, "fp16"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 0, "pf": 3, "pn": 1}, "fp64"),
    ("star_2", "zmarch", {"tx": 32, "ty": 2, "vx": 2, "lz": 5, "xs": 1, "pn": 1}, "fp16"),
    ("varcoeff_star_1", "zmarch", {"tx": 16, "ty": 4, "vx": 2, "lz": 6, "pf": 4, "pn": 1},
     "fp32"),
    ("star_1_t4", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "pn": 1}, "fp16"),
    # half2 arithmetic over lane pairs (fp16 z-marching): pairs inside a thread, a thread per
    # pair (vx 2), the ring, radius 2, varcoeff, temporal chain
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "h2": 1}, "fp16"),
    ("star_1", "zmarch", {"tx": 16, "ty": 2, "vx": 2, "lz": 0, "pf": 2, "h2": 1}, "fp16"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 8, "lz": 5, "pf": 3, "h2": 1}, "fp16"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "h2": 1}, "fp16"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "pf": 2, "h2": 1},
     "fp16"),
    ("star_1_t4", "zmarch", {"tx": 8, "ty": 4, "vx": 8, "lz": 5, "h2": 1}, "fp16"),
    # box stencils by z-marching (rows through L1, accumulators per output plane): both radii,
    # every precision, rows loaded ahead or on use, a whole-interior chunk
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5}, "fp32"),
    ("box_1", "zbox", {"tx": 4, "ty": 4, "vx": 8, "lz": 0, "pn": 0}, "fp16"),
    ("box_1", "zbox", {"tx": 16, "ty": 2, "vx": 2, "lz": 4}, "fp64"),
    ("box_2", "zbox", {"tx": 8, "ty": 4, "vx": 2, "lz": 6}, "fp32"),
    ("box_2", "zbox", {"tx": 8, "ty": 2, "vx": 4, "lz": 3, "pn": 0}, "fp16"),
    ("box_2", "zbox", {"tx": 8, "ty": 8, "vx": 2, "lz": 0}, "fp64"),
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "h2": 1}, "fp16"),
    ("box_2", "zbox", {"tx": 8, "ty": 2, "vx": 8, "lz": 0, "pn": 0, "h2": 1}, "fp16"),
    ("box_2", "zbox", {"tx": 16, "ty": 4, "vx": 2, "lz": 4, "h2": 1}, "fp16"),
    # the warm-up planes peeled (pw): with and without rows in flight, h2, fp64, one-plane chunks
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "pw": 1}, "fp32"),
    ("box_1", "zbox", {"tx": 8, "ty": 2, "vx": 2, "lz": 1, "pn": 0, "pw": 1}, "fp64"),
    ("box_2", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 0, "h2": 1, "pw": 1}, "fp16"),
    ("box_2", "zbox", {"tx": 4, "ty": 4, "vx": 2, "lz": 3, "pn": 0, "pw": 1}, "fp32"),
    # a minimum of resident blocks per SM (__launch_bounds__ register cap): zbox, plane sweep
    ("box_2", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "minb": 4}, "fp32"),
    ("box_2", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "minb": 8}, "fp64"),
    # the largest L1 (a launch attribute; the emulator runs the same code)
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "l1": 1}, "fp32"),
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "l1": 1}, "fp16"),
    ("box_1", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "l1": 1}, "fp64"),
    # a register cap for z-marching (minb): the plain kernel, staged, half2, rows per thread
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 3, "minb": 6}, "fp32"),
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "pf": 2, "pn": 1, "minb": 8}, "fp64"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 8, "lz": 5, "h2": 1, "minb": 4}, "fp16"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "ry": 2, "minb": 2},
     "fp32"),
    # z-chunks first in the launch order (a launch attribute: grid and blockIdx renamed)
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "zo": 1}, "fp32"),
    ("box_1", "zbox", {"tx": 8, "ty": 4, "vx": 4, "lz": 5, "zo": 1}, "fp16"),
    ("box_1", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "zo": 1}, "fp64"),
    ("star_1", "ztile", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "st": 2, "zo": 1}, "fp32"),
    ("star_1_t4", "temporal", {"tx": 16, "ty": 8, "lz": 6, "pipe": 1, "cy": 2, "fs": 2, "zo": 1},
     "fp32"),
    ("star_1_t4", "temporal", {"tx": 16, "ty": 16, "lz": 7, "zo": 1}, "fp64"),
    # fp64 weights in constant memory (the plane sweep's cw)
    ("box_1", "planesweep", {"tx": 16, "ty": 2, "vx": 2, "ry": 4, "lz": 0, "cw": 1}, "fp64"),
    ("box_2", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "cw": 1}, "fp64"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "pf": 2, "cw": 1}, "fp64"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "xs": 1, "cw": 1},
     "fp64"),
    # rows per thread (y neighbours from the own queues) and streaming stores: both radii,
    # varcoeff, every precision, the temporal chain; star_2 ry=4 shifts its last block of rows
    # (18 interior rows; test_bounds has more shifted cases)
    ("star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "ry": 2}, "fp32"),
    ("star_1", "zmarch", {"tx": 8, "ty": 2, "vx": 8, "lz": 0, "ry": 4, "sc": 1}, "fp16"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "ry": 4, "cw": 1}, "fp64"),
    ("star_2", "zmarch", {"tx": 16, "ty": 2, "vx": 4, "lz": 5, "ry": 2, "sc": 1}, "fp32"),
    ("star_2", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "sc": 1}, "fp64"),
    ("varcoeff_star_1", "zmarch", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "ry": 2, "sc": 1},
     "fp16"),
    ("star_1_t4", "zmarch", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "ry": 2}, "fp32"),
    # planes staged by asynchronous copies (synchronous on the emulator: indexing, halo, ring)
    ("star_1", "ztile", {"tx": 8, "ty": 4, "vx": 4, "lz": 4, "st": 2}, "fp32"),
    ("star_1", "ztile", {"tx": 8, "ty": 2, "vx": 8, "lz": 5, "st": 1}, "fp16"),
    ("star_2", "ztile", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "st": 3}, "fp64"),
    ("star_2", "ztile", {"tx": 4, "ty": 4, "vx": 4, "lz": 0, "st": 4}, "fp16"),
    ("star_1_t4", "ztile", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "st": 2}, "fp16"),
    # copies cached in L1 too (ca; a plain move on the emulator, as .cg is)
    ("star_2", "ztile", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "st": 3, "ca": 1}, "fp64"),
    # the plane sweep with its planes staged by asynchronous copies (st planes ahead; ca;
    # synchronous on the emulator as ztile's: indexing, halo, ring, not the waits)
    ("box_1", "planesweep", {"tx": 10, "ty": 3, "vx": 1, "ry": 2, "lz": 4, "st": 3, "ca": 1},
     "fp64"),  # partial x and y tiles (48 = 4 x 10 + 8, 22 = 3 x 6 + 4)
    ("box_1", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "st": 2}, "fp64"),
    ("box_1", "planesweep", {"tx": 8, "ty": 2, "vx": 2, "ry": 4, "lz": 0, "st": 1, "ca": 1,
                             "cw": 1}, "fp64"),
    ("box_2", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 3, "st": 3}, "fp32"),
    ("box_1", "planesweep", {"tx": 16, "ty": 2, "vx": 1, "ry": 4, "lz": 5, "st": 2, "ca": 1},
     "fp32"),
    ("box_1", "planesweep", {"tx": 8, "ty": 4, "vx": 1, "ry": 2, "lz": 4, "st": 2, "h2": 1},
     "fp16"),
    ("box_2", "planesweep", {"tx": 16, "ty": 2, "vx": 1, "ry": 2, "lz": 0, "st": 1, "ca": 1,
                             "h2": 1}, "fp16"),
    # half2 arithmetic (h2, as zmarch h2=1): both radii, every even width, the temporal chain
    ("star_1", "ztile", {"tx": 8, "ty": 2, "vx": 8, "lz": 5, "st": 1, "h2": 1}, "fp16"),
    ("star_1", "ztile", {"tx": 8, "ty": 4, "vx": 2, "lz": 4, "st": 3, "h2": 1}, "fp16"),
    ("star_2", "ztile", {"tx": 4, "ty": 4, "vx": 4, "lz": 0, "st": 4, "ca": 1, "h2": 1}, "fp16"),
    ("star_2", "ztile", {"tx": 8, "ty": 4, "vx": 2, "lz": 3, "st": 2, "h2": 1}, "fp16"),
    ("star_1_t4", "ztile", {"tx": 8, "ty": 4, "vx": 4, "lz": 6, "st": 2, "h2": 1}, "fp16"),
]
