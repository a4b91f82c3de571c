"""The design registry: where each design applies, its space against its generator, and the
typed refusal that ``matrix.build`` turns into "no operator"."""

from __future__ import annotations

import inspect
import re

import pytest

from kernforge.core import ConfigError
from kernforge.forge.ideas import describe, is_tpe, known, tpe_name, tpe_seed
from kernforge.stencil import designs
from kernforge.stencil import matrix as mx
from kernforge.stencil.kernels.design import LAUNCH_ATTRIBUTES, Design, DoesNotFit
from kernforge.stencil.spec import Cell, Precision, Shape, custom, stencil_by_name


def _cell(stencil: str, precision: Precision = Precision.FP32) -> Cell:
    return Cell(stencil_by_name(stencil), Shape(64, 32, 16), precision)


@pytest.mark.parametrize(("stencil", "order"), [
    ("star_1", ["zmarch", "ztile", "planesweep", "naive"]),
    ("star_2", ["zmarch", "ztile", "planesweep", "naive"]),
    ("box_1", ["planesweep", "zbox", "naive"]),
    ("varcoeff_star_1", ["zmarch", "naive"]),
    ("star_1_t4", ["temporal", "zmarch", "ztile", "naive"]),
])
def test_each_family_gets_its_designs_in_preference_order(stencil: str, order: list[str]) -> None:
    assert mx.applicable(_cell(stencil)) == order


def _cells(design: Design) -> list[Cell]:
    """A cell of every family and precision the design builds, planar ones included."""
    stencils = [stencil_by_name(n) for n in ("star_1", "box_1", "varcoeff_star_1", "star_1_t4")]
    stencils += [custom(kind, 1, {}, dims=2) for kind in ("star", "box")]
    cells = [Cell(st, Shape(64, 32, 16), p) for st in stencils for p in Precision]
    return [c for c in cells if design.rank(c) is not None]


@pytest.mark.parametrize("name", list(designs.REGISTRY))
def test_every_knob_is_declared_in_its_design_module(name: str) -> None:
    """A knob is declared once, in its design's module: its values in the space, its words in
    the design's knobs (each worded knob in some space), its effect in the generator."""
    design = designs.REGISTRY[name]
    accepted = set(inspect.signature(design.generate).parameters) - {"cell"}
    seen: set[str] = set()
    assert _cells(design)
    for cell in _cells(design):
        space = design.space(cell)
        assert set(space) - set(LAUNCH_ATTRIBUTES) <= accepted, (name, cell.id)
        assert all(len(v) == len(set(v)) and v for v in space.values()), (name, cell.id)
        assert set(space) <= set(design.knobs), (name, cell.id, set(space) - set(design.knobs))
        seen |= set(space)
    assert seen == set(design.knobs), sorted(set(design.knobs) - seen)
    assert all(": " in text for text in design.knobs.values())  # a readable name, then the idea


def test_the_forge_takes_each_knob_in_its_designs_words() -> None:
    for knob in designs.knob_names():
        assert known(knob) and describe(knob) == designs.meaning(knob)
    assert describe("pw") == "zbox: " + designs.get("zbox").knobs["pw"]
    ry = describe("ry")  # worded apart by the two designs that have it
    assert ry.startswith("zmarch: rows per thread") and "; planesweep: register blocking" in ry
    assert not known("nope") and designs.meaning("nope") is None


def test_a_refusal_is_typed_and_build_turns_only_that_into_none() -> None:
    cell = _cell("star_1")
    with pytest.raises(DoesNotFit) as exc:
        designs.get("zmarch").generate(cell, vx=3)
    assert isinstance(exc.value, ConfigError) and isinstance(exc.value, ValueError)
    assert exc.value.hint
    assert mx.build("zmarch", cell, {**mx.defaults("zmarch", cell), "vx": 3}) is None
    with pytest.raises(TypeError):  # a bug (an unknown keyword) is not a refusal
        mx.build("zmarch", cell, {**mx.defaults("zmarch", cell), "nope": 1})


def test_a_design_for_an_unknown_family_is_a_typed_error() -> None:
    naive = designs.get("naive")
    with pytest.raises(ConfigError, match="unknown families") as exc:
        Design("odd", {"hexagonal": 0}, naive.space, naive.generate)
    assert "star" in (exc.value.hint or "")


def test_an_unknown_design_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown stencil design 'nope'") as exc:
        designs.get("nope")
    assert "zmarch" in (exc.value.hint or "")


def test_the_tpe_seed_is_a_parameter_spelt_in_the_round_name() -> None:
    assert is_tpe("tpe") and is_tpe("tpe2") and is_tpe("tpe17")
    assert not is_tpe("tpe1") and not is_tpe("tpe0") and not is_tpe("tpe02")
    assert known("tpe9") and not known("tpe1") and known("l2p")
    assert "seed 9" in describe("tpe9")
    assert [tpe_seed(n) for n in ("tpe", "tpe2", "tpe17", "tpe1", "lz")] == [1, 2, 17, None, None]
    assert [tpe_name(s) for s in (1, 2, 17)] == ["tpe", "tpe2", "tpe17"]
    for bad in (0, -3, 2.0):
        with pytest.raises(ConfigError) as exc:
            tpe_name(bad)  # type: ignore[arg-type]
        assert exc.value.hint


_AXES = re.compile(r"\bblockIdx\.([xyz])\b")


@pytest.mark.parametrize("name", [n for n, d in designs.REGISTRY.items()
                                  if "zo" in d.space(_cell("star_1_t4" if n == "temporal"
                                                           else "box_1" if n == "zbox"
                                                           else "star_1"))])
def test_the_launch_order_is_emitted_not_patched(name: str) -> None:
    """``zo=1`` emits the tile coordinates from the rotated ``blockIdx`` components: its source
    is the ``zo=0`` source with every ``blockIdx`` axis renamed x->y->z->x (what a pass over the
    text would give), in every kernel a design's options select."""
    rotate = {"x": "y", "y": "z", "z": "x"}
    checked = 0
    for stencil in ("star_1", "star_2", "box_1", "varcoeff_star_1", "star_1_t4"):
        for precision in Precision:
            cell = _cell(stencil, precision)
            if designs.REGISTRY[name].rank(cell) is None:
                continue
            base = mx.defaults(name, cell)
            space = mx.space(name, cell)
            for k, vals in space.items():
                for v in vals:
                    plain = mx.build(name, cell, {**base, k: v, "zo": 0})
                    ordered = mx.build(name, cell, {**base, k: v, "zo": 1})
                    if plain is None or k in ("zo", "l1"):  # l1: a first line of its own
                        continue
                    assert ordered is not None and ordered.params["zo"] == 1
                    renamed = _AXES.sub(lambda m: f"blockIdx.{rotate[m.group(1)]}", plain.source)
                    first, _, rest = ordered.source.partition("\n")
                    assert "launch order" in first and rest == renamed, (cell.id, k, v)
                    assert [la.grid for la in ordered.launches] == [
                        (la.grid[2], la.grid[0], la.grid[1]) for la in plain.launches]
                    checked += 1
    assert checked > 20
