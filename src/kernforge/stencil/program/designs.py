"""The designs that generate operators for lifted programs, and the candidates to try."""

from __future__ import annotations

from . import codegen_plain, codegen_tiled
from .binding import Binding
from .codegen import Kernel, Refused
from .model import StencilProgram

DESIGNS = {m.DESIGN: m for m in (codegen_tiled, codegen_plain)}


def candidates(p: StencilProgram, b: Binding, limit: int | None = None
               ) -> tuple[list[Kernel], dict[str, str]]:
    """Operators for ``p`` bound by ``b`` at each design's presets (tiled first, plain last),
    and per design or preset that generated nothing, why. ``limit``: at most that many, the
    first plain preset always among them."""
    out: list[Kernel] = []
    refused: dict[str, str] = {}
    for name, mod in DESIGNS.items():
        for knobs in mod.presets(p) or [{}]:
            try:
                k = mod.generate(p, b, **knobs)
            except Refused as exc:
                refused.setdefault(name, exc.message)
                continue
            if all(o.key != k.key for o in out):
                out.append(k)
    if limit is not None and len(out) > limit:
        plain = [k for k in out if k.design == codegen_plain.DESIGN]
        head = [k for k in out if k.design != codegen_plain.DESIGN][:max(0, limit - 1)]
        out = head + plain[:limit - len(head)]
    return out, refused
