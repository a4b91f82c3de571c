"""``--cache auto|warm|flushed``: the cache state units are replayed in (docs/integrity.md,
"Cache state of a replay")."""

from __future__ import annotations

import argparse

from ..harness.cache import MODES


def add_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", choices=MODES, default=None,
                   help="the cache state of every timed replay: auto (each unit as its "
                        "program had it, from its footprint against the cache, or its time in "
                        "the program), warm, or flushed; a choice other than auto is kept with "
                        "each unit, for the gates, export and later commands (default: the "
                        "choice kept with the unit, else auto; --cache auto forgets it)")
