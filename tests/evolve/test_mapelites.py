from __future__ import annotations

import random
from collections import Counter

import pytest

from kernforge.core import ConfigError, Status
from kernforge.evolve.config import EvolveConfig
from kernforge.evolve.features import FeatureDim, code_hash, code_size, default_features
from kernforge.evolve.mapelites import Archive, MapElitesConfig
from kernforge.evolve.types import Program

DIMS = (FeatureDim("code_size", 0, 40, 4),)


def _p(pid: str, fit: float | None, size: float, island: int = 0) -> Program:
    return Program(id=pid, code=pid, parent_id=None, island=island, generation=0, fitness=fit,
                   status=Status.OK if fit is not None else Status.WRONG_RESULT,
                   features={"code_size": size})


def test_features_and_normalization():
    code = "// c\nint a ;\n\n/* x\n y */ int  b=1;\n"
    assert code_size(code) == 2
    assert code_hash(code) == code_hash("int a;\nint b = 1; // other comment")
    assert code_hash(code) != code_hash("int a; int b = 2;")
    f = default_features(code, 2e-3, {"num_regs": 40}, bytes_moved=4e6)
    assert f == {"code_size": 2.0, "num_regs": 40.0, "bandwidth": pytest.approx(2.0)}
    q = FeatureDim("x", 0, 1, 4, mode="quantile")
    assert q.quantile_edges([1, 2, 3, 4, 5, 6, 7, 8]) == [3, 5, 7]


def test_insert_and_replace():
    a = Archive(MapElitesConfig(islands=2, dims=DIMS))
    assert a.insert(0, _p("x", 2.0, 5)) == (True, "0")
    assert a.insert(0, _p("y", 3.0, 6)) == (False, "0")  # slower, same cell
    assert a.insert(0, _p("z", 1.0, 7)) == (True, "0")  # faster replaces
    assert a.insert(0, _p("w", 5.0, 25)) == (True, "2")  # new cell
    assert a.insert(0, _p("bad", None, 15))[0] is False  # invalid never enters
    assert [e.id for e in a.elites(0)] == ["z", "w"] and a.best().id == "z"
    assert a.elites(1) == []


def test_ring_migration_top_fraction():
    a = Archive(MapElitesConfig(islands=3, dims=DIMS, migration_fraction=0.5))
    for i, fit in enumerate([1.0, 2.0, 3.0, 4.0]):
        a.insert(0, _p(f"a{i}", fit, i * 10))
    moves = a.migrate()
    assert [(m.src, m.dst, m.program.id) for m in moves] == [(0, 1, "a0"), (0, 1, "a1")]
    assert {e.id for e in a.elites(1)} == {"a0", "a1"}
    moves = a.migrate()  # one hop per epoch: island 1 -> 2, island 0 -> 1 again (rejected)
    assert {(m.src, m.dst, m.accepted) for m in moves} == {(0, 1, False), (1, 2, True)}


def test_selection_ratios():
    cfg = MapElitesConfig(islands=1, dims=DIMS, exploration=0.2, exploitation=0.7, elite=0.1)
    a = Archive(cfg)
    for i in range(4):
        a.insert(0, _p(f"e{i}", 1.0 + i, i * 10))
    rng = random.Random(0)
    hows = Counter(a.select_parent(0, rng)[1] for _ in range(5000))
    assert abs(hows["exploration"] / 5000 - 0.2) < 0.03
    assert abs(hows["exploitation"] / 5000 - 0.7) < 0.03
    assert abs(hows["elite"] / 5000 - 0.1) < 0.03
    insp = a.inspirations(0, rng, a.best())
    assert len(insp) == 3 and "e0" not in {p.id for p in insp}
    assert Archive(cfg).select_parent(0, rng) == (None, "empty")


def test_quantile_refit_rebins():
    a = Archive(MapElitesConfig(islands=1, dims=(FeatureDim("code_size", 0, 1000, 2,
                                                            mode="quantile"),)))
    for i in range(4):
        a.insert(0, _p(f"q{i}", 1.0 + i, float(i)))
    assert len(a.elites(0)) == 1  # all below the fixed midpoint 500
    everyone = [_p(f"q{i}", 1.0 + i, float(i)) for i in range(4)]
    assert a.refit({"code_size": [0.0, 1.0, 2.0, 3.0]}, everyone)
    assert [p.id for p in a.elites(0)] == ["q0", "q2"]


def test_config_validation():
    with pytest.raises(ConfigError, match="'bogus'"):
        EvolveConfig.from_dict({"bogus": 1})
    with pytest.raises(ConfigError, match="'colour'"):
        EvolveConfig.from_dict({"mapelites": {"colour": 1}})
    with pytest.raises(ConfigError, match="'width'"):
        EvolveConfig.from_dict({"mapelites": {"dims": [{"name": "x", "width": 2}]}})
    with pytest.raises(ConfigError, match="sum to 1"):
        MapElitesConfig(exploration=0.5, exploitation=0.5, elite=0.5)
    with pytest.raises(ConfigError):
        EvolveConfig(eval_slots=0)
    cfg = EvolveConfig.from_dict({"seed": 3, "mapelites": {"islands": 2, "dims": [
        {"name": "code_size", "lo": 0, "hi": 10, "bins": 2}]}})
    assert cfg.mapelites.islands == 2 and cfg.mapelites.dims[0].bins == 2
