"""Search spaces: dimensions, constraints, validation, JSON round trip, the space file."""

from __future__ import annotations

import json

import pytest

from kernforge.core import ConfigError
from kernforge.tune import (
    AtMost,
    ChangedAtMost,
    Dimension,
    Predicate,
    ProductAtMost,
    SearchSpace,
)
from kernforge.tune.samplers.encoding import Encoding

BLOCKS = [(128, 1, 1), (64, 2, 1), (32, 4, 1), (256, 4, 1), (1024, 2, 1)]


def launch_space() -> SearchSpace:
    return SearchSpace(
        [Dimension.categorical("launch.block", BLOCKS),
         Dimension.ordinal("opt.launch_bounds", [0, 128, 256, 512]),
         Dimension.integer("opt.maxrregcount", 32, 128, 32),
         Dimension.boolean("def.USE_SHARED")],
        [ProductAtMost(("launch.block",), 1024), AtMost(("launch.block",), "opt.launch_bounds")])


def test_size_counts_the_grid_and_valid_points_apply_constraints() -> None:
    space = launch_space()
    assert space["opt.maxrregcount"].size == 4  # 32, 64, 96, 128
    assert space.size() == 5 * 4 * 4 * 2
    valid = list(space.valid_points())
    assert all(space.check(p) is None for p in valid)
    # block 2048 never; per bound: 0 -> 4 blocks, 128 -> 3, 256 -> 3, 512 -> 3
    assert len(valid) == (4 + 3 + 3 + 3) * 4 * 2
    assert next(iter(space.points())) == {"launch.block": (128, 1, 1), "opt.launch_bounds": 0,
                                       "opt.maxrregcount": 32, "def.USE_SHARED": False}


def test_constraints_explain_why_a_config_is_invalid() -> None:
    space = launch_space()
    cfg = {**space.default(), "launch.block": (256, 4, 1), "opt.launch_bounds": 256}
    reason = space.check(cfg)
    assert reason is not None and "1024" in reason and "opt.launch_bounds=256" in reason
    assert space.check({**cfg, "opt.launch_bounds": 0}) is None  # 0 = unlimited
    assert "2048 exceeds the limit 1024" in (space.check({**cfg, "launch.block": (1024, 2, 1)})
                                             or "")
    even = Predicate("even_regs", lambda c: c["opt.maxrregcount"] % 64 == 0)
    assert even.check({"opt.maxrregcount": 96}) == "violates even_regs"


def test_validate_refuses_unknown_names_bad_values_and_missing_names() -> None:
    space = launch_space()
    good = space.default()
    assert space.validate({**good, "launch.block": [64, 2, 1]})["launch.block"] == (64, 2, 1)
    with pytest.raises(ConfigError, match="unknown dimension 'opt.nope'"):
        space.validate({**good, "opt.nope": 1})
    with pytest.raises(ConfigError, match="not allowed for 'opt.maxrregcount'"):
        space.validate({**good, "opt.maxrregcount": 33})
    with pytest.raises(ConfigError, match="not allowed for 'def.USE_SHARED'"):
        space.validate({**good, "def.USE_SHARED": 1})
    with pytest.raises(ConfigError, match="lacks dimension 'launch.block'"):
        space.validate({k: v for k, v in good.items() if k != "launch.block"})
    with pytest.raises(ConfigError, match="unknown dimension 'launch.grid'"):
        SearchSpace(space.dimensions, [ProductAtMost(("launch.grid",), 10)])


def test_baseline_overrides_defaults_and_must_be_valid() -> None:
    space = launch_space()
    s = SearchSpace(space.dimensions, space.constraints, {"launch.block": (64, 2, 1)})
    assert s.baseline == {**space.default(), "launch.block": (64, 2, 1)}
    with pytest.raises(ConfigError, match="baseline configuration is invalid"):
        SearchSpace(space.dimensions, space.constraints, {"launch.block": (1024, 2, 1)})


def test_dimension_checks() -> None:
    assert Dimension.integer("n", 1, 10, 4).choices == (1, 9, 4)
    assert Dimension.integer("n", 1, 64, log=True).default == 1
    with pytest.raises(ConfigError, match="log needs step 1"):
        Dimension.integer("n", 0, 64, log=True)
    with pytest.raises(ConfigError, match="repeated choices"):
        Dimension.categorical("c", [(1, 2), [1, 2]])
    with pytest.raises(ConfigError, match="not one of its values"):
        Dimension.ordinal("o", [1, 2], default=3)
    with pytest.raises(ConfigError, match="unknown kind"):
        Dimension("x", "float", (0, 1))
    with pytest.raises(ConfigError, match="choices must be"):
        Dimension.categorical("c", [object()])
    assert Dimension.categorical("c", [None, "a"]).default is None


def test_points_refuse_a_grid_too_large_to_enumerate() -> None:
    space = SearchSpace([Dimension.integer("a", 0, 9999), Dimension.integer("b", 0, 9999)])
    with pytest.raises(ConfigError, match="too many to enumerate"):
        next(space.valid_points())


def test_one_change_at_a_time_from_a_start_is_the_list_of_single_changes() -> None:
    """What an exhaustive study of a native unit visits: the recorded configuration, then
    each dimension changed alone (the block, the carveout, the image)."""
    dims = [Dimension.categorical("launch.block", BLOCKS),
            Dimension.categorical("carveout", [None, 0, 100]),
            Dimension.categorical("image", ["recorded", "ptx", "nvrtc"])]
    start = {"launch.block": (128, 1, 1), "carveout": None, "image": "recorded"}
    rule = ChangedAtMost(("launch.block", "carveout", "image"), 1, start)
    space = SearchSpace(dims, [rule], start)
    valid = list(space.valid_points())
    assert valid[0] == start and len(valid) == 1 + 4 + 2 + 2
    assert all(sum(p[k] != start[k] for k in start) <= 1 for p in valid)
    why = space.check({**start, "carveout": 0, "image": "ptx"})
    assert why == "carveout, image changed at once (at most 1 may be)"
    back = SearchSpace.from_json(json.loads(json.dumps(space.to_json())))
    assert list(back.valid_points()) == valid  # the block shapes read back as tuples
    for bad in ({"changed_at_most": ["image"], "limit": 1, "from": {}},
                {"changed_at_most": ["image"], "limit": -1, "from": {"image": "ptx"}},
                {"changed_at_most": ["image"], "limit": 1, "from": ["image"]}):
        with pytest.raises(ConfigError, match="changed_at_most"):
            SearchSpace.from_mapping({"dimensions": {"image": {"categorical": ["a", "b"]}},
                                      "constraints": [bad]})


def test_json_round_trip() -> None:
    rule = Predicate("wide", lambda c: c["launch.block"][0] >= 64)
    base = launch_space()
    space = SearchSpace(base.dimensions, (*base.constraints, rule),
                        {"launch.block": (64, 2, 1), "opt.maxrregcount": 64})
    text = json.dumps(space.to_json())
    back = SearchSpace.from_json(json.loads(text), predicates={"wide": rule.fn})
    assert back == space and back.to_json() == space.to_json()
    assert back.baseline == space.baseline and back["launch.block"].choices[0] == (128, 1, 1)
    assert list(back.valid_points()) == list(space.valid_points())
    with pytest.raises(ConfigError, match="predicate 'wide'"):
        SearchSpace.from_json(json.loads(text))


def test_space_file_plain_dimensions_form() -> None:
    space = SearchSpace.from_mapping({
        "def.TILE_J": {"ordinal": [4, 8, 16, 32, 64]},
        "opt.unroll": {"bool": True},
        "opt.maxrregcount": {"int": [32, 255], "log": True, "default": 64},
        "launch.block": {"categorical": [[128, 1, 1], [64, 2, 1]], "default": [64, 2, 1]},
    })
    assert space.baseline == {"def.TILE_J": 4, "opt.unroll": True, "opt.maxrregcount": 64,
                              "launch.block": (64, 2, 1)}
    assert space["opt.maxrregcount"].log and space.size() == 5 * 2 * 224 * 2


def test_space_file_document_form() -> None:
    space = SearchSpace.from_mapping({
        "version": 1,
        "dimensions": {"launch.block": {"categorical": BLOCKS},
                       "opt.launch_bounds": {"ordinal": [0, 128, 256]}},
        "constraints": [{"product_at_most": ["launch.block"], "limit": 1024},
                        {"at_most": "launch.block", "bound": "opt.launch_bounds"}],
        "baseline": {"launch.block": [32, 4, 1]},
    })
    assert space.baseline == {"launch.block": (32, 4, 1), "opt.launch_bounds": 0}
    assert len(space.constraints) == 2
    assert space.check({"launch.block": (256, 4, 1), "opt.launch_bounds": 128})


@pytest.mark.parametrize("data, match", [
    ({"dimensions": {"a": {"bool": True}}, "constrains": []}, "unknown key 'constrains'"),
    ({"a": {"ordinal": [1, 2], "defualt": 1}}, "unknown key 'defualt' in dimension 'a'"),
    ({"a": {"bool": True, "default": False}}, "unknown key 'default' in dimension 'a'"),
    ({"a": {"ordinal": [1, 2], "int": [1, 2]}}, "exactly one of"),
    ({"a": {"bool": "yes"}}, "write its default"),
    ({"a": [1, 2, 3]}, "must be a mapping"),
    ({"a": {"ordinal": 4}}, "needs a list"),
    ({"a": {"int": [1, 2, 3, 4]}}, r"needs \(low, high\[, step\]\)"),
    ({"dimensions": {"a": {"int": [1, 8]}},
      "constraints": [{"product_at_most": ["a"], "limit": 4, "max": 3}]},
     "unknown key 'max' in product_at_most"),
    ({"dimensions": {"a": {"int": [1, 8]}}, "constraints": [{"at_most": ["a"]}]},
     "needs 'bound'"),
    ({"dimensions": {"a": {"int": [1, 8]}}, "baseline": {"b": 1}}, "unknown dimension 'b'"),
    ({"dimensions": {"a": {"int": [1, 8]}}, "version": 2}, "version 2"),
])
def test_space_file_errors_name_the_offending_key(data: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        SearchSpace.from_mapping(data)


def test_optuna_encoding_round_trips_every_kind() -> None:
    space = SearchSpace([Dimension.categorical("launch.block", BLOCKS),
                         Dimension.categorical("opt.mode", ["fast", "safe", None]),
                         Dimension.categorical("opt.mixed", [1, True, "1"]),
                         Dimension.ordinal("def.T", [4, 8, 16]),
                         Dimension.integer("opt.r", 32, 128, 32),
                         Dimension.boolean("def.U")])
    enc = Encoding(space)
    for point in space.points():
        params = enc.encode(point)
        for name, value in params.items():
            dist = enc.distributions[name]
            assert dist._contains(dist.to_internal_repr(value))
        back = enc.decode(params)
        assert back == point
        assert [type(v) for v in back.values()] == [type(v) for v in point.values()]
    assert enc.encode(space.baseline)["launch.block"] == "[128,1,1]"
    assert enc.encode(space.baseline)["def.T"] == 0
    assert enc.encode(space.baseline)["opt.mode"] is None
    assert enc.encode({**space.baseline, "opt.mixed": True})["opt.mixed"] == "true"
