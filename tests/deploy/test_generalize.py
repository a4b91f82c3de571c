"""Exported native entries of launches that differ only in scalars share one entry."""

from __future__ import annotations

from typing import Any

from kernforge.deploy.generalize import differing_bytes, generalize, merged_key, widen

X8 = "x" * 16  # a pointer word, never compared
PARAMS = [(0, 8), (8, 8), (16, 4), (20, 4)]  # x, y, float a, int n


def _key(a: str, n: str = "e8030000") -> str:
    return X8 + X8 + a + n


def _entry(key: str, **over: Any) -> dict[str, Any]:
    e = {"kernel": "axpy", "name": "axpy", "grid": [8, 1, 1], "block": [128, 1, 1],
         "shared_mem": 0, "key": key, "device": "fake", "image": "i.bin", "image_sha256": "ab",
         "jit": {}, "new_grid": [4, 1, 1], "new_block": [256, 1, 1], "carveout": None,
         "evidence": {"speedup": 1.5, "variant": "block=256x1x1"}}
    e.update(over)
    return e


def test_a_scalar_that_differs_is_left_out_whole() -> None:
    keys = [_key("0000003f"), _key("0000203f")]  # 0.5f and 0.625f: only byte 18 differs
    assert differing_bytes(keys) == [18]
    assert widen([18], PARAMS) == [16, 17, 18, 19]
    assert merged_key(keys, PARAMS) == X8 + X8 + "x" * 8 + "e8030000"
    # a field of a struct passed by value: its 8-byte word only
    assert widen([21], [(0, 8), (8, 32)]) == [16, 17, 18, 19, 20, 21, 22, 23]
    assert widen([39], [(0, 8), (8, 32)]) == list(range(32, 40))


def test_launches_with_one_winner_become_one_entry() -> None:
    entries = [_entry(_key("0000003f"), evidence={"speedup": 1.5, "variant": "v"}),
               _entry(_key("0000203f"), evidence={"speedup": 1.4, "variant": "v"}),
               _entry(_key("0000403f"), evidence={"speedup": 1.6, "variant": "v"})]
    out, notes = generalize(entries, [PARAMS] * 3)
    assert len(out) == 1 and out[0]["key"] == X8 + X8 + "x" * 8 + "e8030000"
    assert [e["speedup"] for e in out[0]["evidence"]["launches"]] == [1.5, 1.4, 1.6]
    assert notes == [("axpy: one entry for 3 recorded launches with the same winner (v); their "
                      "parameter bytes 16-19 differ and are not compared")]


def test_different_winners_shapes_or_layouts_stay_apart() -> None:
    a, b = _key("0000003f"), _key("0000203f")
    for other in (_entry(b, new_block=[512, 1, 1], new_grid=[2, 1, 1]),  # another winner
                  _entry(b, image_sha256="cd"),  # another image
                  _entry(b, grid=[16, 1, 1])):  # recorded with another geometry
        out, notes = generalize([_entry(a), other], [PARAMS, PARAMS])
        assert [e["key"] for e in out] == [a, b] and notes == []
    out, _ = generalize([_entry(a), _entry(b)], [PARAMS, [(0, 8), (8, 8), (16, 8)]])
    assert len(out) == 2  # another parameter layout


def test_the_same_launch_recorded_twice_is_one_entry() -> None:
    out, notes = generalize([_entry(_key("0000003f")), _entry(_key("0000003f"))], [PARAMS] * 2)
    assert len(out) == 1 and out[0]["key"] == _key("0000003f") and notes == []
