"""What each forge change tries, in words: the idea log's and the performance log's text, and
the names ``--changes`` accepts (``loop.round_plan`` checks them here with :func:`known`): the
round kinds here, and every knob of a registered design in the words its design module gives
it (:func:`kernforge.stencil.designs.meaning`), so a new knob needs no line here.

The TPE round's seed is a parameter of the round (``forge/bo.py``: ``tpe_round(..., seed)``),
spelt in its name on the command line: ``tpe`` is seed 1, ``tpeN`` (N >= 2) seed N, the same
search seeded apart (by the cell's id and the seed), so a run from an unchanged incumbent asks
other points of the same space. :func:`tpe_seed` and :func:`tpe_name` convert between the two.
"""

from __future__ import annotations

import re

from ..core import ConfigError
from ..stencil import designs

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
    return change in IDEAS or change in designs.knob_names() or is_tpe(change)


def describe(change: str) -> str:
    """The idea log's words for a change (a knob's: what its designs say it does)."""
    if change in IDEAS:
        return IDEAS[change]
    knob = designs.meaning(change)
    if knob is not None:
        return knob
    seed = tpe_seed(change)
    if seed is not None and seed > 1:
        return f"the tpe round with seed {seed}: other points of the same space"
    return change


def names() -> str:
    """The accepted names, for a hint."""
    return ", ".join([*IDEAS, *designs.knob_names(), "tpeN (N >= 2: another seed)"])


# the round kinds; every knob of a design is a change too, in the words its design gives it
IDEAS = {
    "design": "restructure: z-marching with a register queue (star), shared-memory plane sweep "
              "with register-blocked accumulators (box), 2.5D temporal blocking (multi-step)",
    "pairs": "two parameters changed at once (vector width, z-chunk, block shape, planes in "
             "flight, loads ahead, rows per thread): out of one-change local optima",
    "pairs2": "the next 40 two-parameter changes in the pair round's fixed order",
    "tpe": "Bayesian optimization (TPE) over every parameter of the incumbent's design at once, "
           "3 batches of 16 per cell; the fastest two screened go through the gate",
}
