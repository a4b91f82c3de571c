"""The frozen data model: LaunchConfig, CompileOptions, KernelSource, Variant, Registry, errors."""

from __future__ import annotations

import pytest

from kernforge.core import (
    CompileError,
    CompileOptions,
    ConfigError,
    KernelSource,
    KernforgeError,
    LaunchConfig,
    PluginNotFoundError,
    Registry,
    Status,
    Variant,
)

SRC = KernelSource("void k(int *a) { a[0] = 1; }", "k")


# ---- LaunchConfig -------------------------------------------------------------------------
def test_launch_dims_are_normalized() -> None:
    cfg = LaunchConfig(grid=4, block=(32, 2))
    assert cfg.grid == (4, 1, 1) and cfg.block == (32, 2, 1)
    assert cfg.threads_per_block == 64
    assert LaunchConfig(grid=[2, 3, 4]).grid == (2, 3, 4)


@pytest.mark.parametrize("kwargs, match", [
    ({"grid": 0}, "grid"), ({"block": (1, 2, 3, 4)}, "block"), ({"grid": ()}, "grid"),
    ({"block": (32, -1)}, "block"), ({"shared_mem": -1}, "shared_mem"), ({"threads": 0}, "threads"),
])
def test_launch_validation(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        LaunchConfig(**kwargs)
    assert err.value.hint


def test_launch_json_round_trip() -> None:
    cfg = LaunchConfig(grid=(8, 2), block=128, shared_mem=1024, threads=3)
    assert LaunchConfig.from_json(cfg.to_json()) == cfg
    assert LaunchConfig.from_json({}) == LaunchConfig()


# ---- CompileOptions -----------------------------------------------------------------------
def test_options_sorted_and_order_independent() -> None:
    a = CompileOptions.of({"b": 1, "a": "x"})
    assert a.values == (("a", "x"), ("b", 1))
    assert a == CompileOptions((("b", 1), ("a", "x")))
    assert a.get("a") == "x" and a.get("zz", 5) == 5 and a.as_dict() == {"a": "x", "b": 1}


def test_options_merge_overrides() -> None:
    base = CompileOptions.of({"a": 1, "b": 2}, b=3)
    assert base.as_dict() == {"a": 1, "b": 3}
    assert base.merged({"a": 9, "c": True}).as_dict() == {"a": 9, "b": 3, "c": True}
    assert base.merged(CompileOptions.of(b=0)).as_dict() == {"a": 1, "b": 0}
    assert base.as_dict() == {"a": 1, "b": 3}, "merged returns a new object"


# ---- KernelSource and Variant ---------------------------------------------------------------
def test_source_validation() -> None:
    with pytest.raises(ConfigError, match="language"):
        KernelSource("x", "k", "fortran")
    with pytest.raises(ConfigError, match="identifier"):
        KernelSource("x", "not an id")
    assert SRC.digest != SRC.with_code(SRC.code + " ").digest


def test_variant_key_is_stable() -> None:
    a = Variant(SRC, CompileOptions.of(x=1, y="a"), LaunchConfig(grid=2), (("B", 4), ("A", "1")))
    b = Variant(KernelSource(SRC.code, "k"), CompileOptions.of(y="a", x=1),
                LaunchConfig(grid=(2, 1, 1)), (("A", "1"), ("B", "4")))
    assert a.key() == b.key() and len(a.key()) == 16
    assert a.defines == (("A", "1"), ("B", "4"))


@pytest.mark.parametrize("change", [
    {"source": SRC.with_code(SRC.code + "\n")},
    {"source": KernelSource(SRC.code, "k", "cuda")},
    {"source": KernelSource(SRC.code.replace("k(", "k2("), "k2")},
    {"options": {"x": 2}},
    {"options": {"z": 0}},
    {"launch": LaunchConfig(threads=2)},
    {"launch": LaunchConfig(block=64)},
    {"defines": {"B": 5}},
    {"defines": {"C": 1}},
])
def test_variant_key_is_sensitive_to_each_part(change: dict) -> None:
    base = Variant(SRC, CompileOptions.of(x=1), LaunchConfig(), (("B", "4"),))
    assert base.with_(**change).key() != base.key()


def test_variant_with_merges() -> None:
    v = Variant(SRC, CompileOptions.of(x=1), defines=(("A", 1),))
    w = v.with_(options={"y": 2}, defines={"B": 3})
    assert w.options.as_dict() == {"x": 1, "y": 2}
    assert dict(w.defines) == {"A": "1", "B": "3"}
    assert w.source is SRC and w.launch == v.launch
    with pytest.raises(ConfigError, match="identifier"):
        Variant(SRC, defines=(("1BAD", 1),))


# ---- Registry, Status, errors ----------------------------------------------------------------
def test_registry_lazy_lookup_and_unknown_name() -> None:
    reg: Registry[object] = Registry("widget")
    reg.register("json", "json:dumps")
    reg.register("path", "os.path:join")
    assert reg.names() == ["json", "path"]
    import json
    assert reg.get("json") is json.dumps
    with pytest.raises(PluginNotFoundError, match="no widget named 'nope'") as err:
        reg.get("nope")
    assert isinstance(err.value, ConfigError)
    assert err.value.hint and "json" in err.value.hint and "path" in err.value.hint
    assert "(none registered)" in str(pytest.raises(PluginNotFoundError,
                                                    Registry("empty").get, "x").value)


def test_errors_carry_hint_status_and_log() -> None:
    err = CompileError("k: rejected", log="error: x", hint="fix it")
    assert str(err) == "k: rejected\n  hint: fix it"
    assert err.status is Status.COMPILE_FAILED and err.log == "error: x"
    assert isinstance(err, KernforgeError) and str(KernforgeError("plain")) == "plain"
    assert ConfigError("x").exit_code == 2 and Status.OK.ok and not Status.TIMEOUT.ok


def test_reblocked_keeps_the_work_decomposition() -> None:
    launch = LaunchConfig(grid=(16, 128, 510), block=(32, 4, 1), shared_mem=64)
    new = launch.reblocked((128, 2, 1))
    assert new.block == (128, 2, 1) and new.grid == (4, 256, 510) and new.shared_mem == 64
    odd = launch.reblocked((100, 3, 1))  # rounds up: at least as many threads per dimension
    assert odd.grid == (6, 171, 510)
    assert all(g * b >= og * ob for g, b, og, ob in zip(odd.grid, odd.block, launch.grid,
                                                         launch.block))
