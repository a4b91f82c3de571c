"""The function attributes a program sets travel with its recording (record/native/kf_funcattr.c),
run for real on the fake CUDA driver, which refuses a launch with more than 48 KiB of dynamic
shared memory unless MAX_DYNAMIC_SHARED_SIZE_BYTES was raised on its function and writes what
is set to FAKE_CUDA_ATTRS: recording, replay (backends/image_build.load_kernel) and deployment
(kf_deploy.c) of fake_app's "shmem" mode, whose heat launches use 64 KiB."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernforge.backends.driver import Driver
from kernforge.cli.main import main
from kernforge.core import LaunchError
from kernforge.core.native import FuncAttrs
from kernforge.record._layout import manifest_checksum
from kernforge.record.native_format import read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated
from kernforge.testing.fakedriver import FakeCuda

DYN = 64 * 1024


@pytest.fixture(scope="module")
def shmem_unit(fake: FakeCuda, record_fake: Callable[..., Any],
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    """heat's first launch of fake_app in "shmem" mode, recorded."""
    from kernforge.pipeline.run_app import record_command

    out = tmp_path_factory.mktemp("shmem")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LD_LIBRARY_PATH", str(fake.libdir))
        mp.delenv("LD_PRELOAD", raising=False)
        status, units, problems, _ = record_command(fake.command(10, 1000, "shmem"), out,
                                                    kernels="heat", max_instances=1)
    assert status == 0 and not problems and [u.name for u in units] == ["heat-0"]
    return out / "heat-0"


def _plain(fake: FakeCuda, *extra: str) -> str:
    return subprocess.run(fake.command(10, 1000, *extra), env=fake.env, capture_output=True,
                          text=True, check=True).stdout


def _attrs_log(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    log = tmp_path / "attrs.log"
    monkeypatch.setenv("FAKE_CUDA_ATTRS", str(log))
    return log


def test_the_fake_refuses_64_kib_until_the_attribute_is_raised(on_fake: FakeCuda) -> None:
    drv = Driver(library=str(on_fake.libdir / "libcuda.so.1"))
    fn = drv.function(drv.load(on_fake.image()), "blockwidth")
    out = drv.alloc(8 * 4)
    params = out.to_bytes(8, "little")
    with pytest.raises(LaunchError):
        drv.launch(fn, (1, 1, 1), (128, 1, 1), DYN, params)
    drv.set_func_attrs(fn, FuncAttrs(), DYN)  # nothing recorded: raised to the launch's need
    drv.launch(fn, (1, 1, 1), (128, 1, 1), DYN, params)
    assert drv.lib.cuFuncSetAttribute(fn, 8, 300 * 1024) != 0  # above the device's most


def test_the_attributes_the_program_set_are_recorded(fake: FakeCuda, shmem_unit: Path) -> None:
    assert _plain(fake, "shmem") == _plain(fake)  # the mode changes nothing the program prints
    rec = read_native(shmem_unit)
    assert rec.shared_mem == DYN
    assert rec.func_attrs == FuncAttrs(((8, DYN), (9, 25)), cache_config=2)
    m = json.loads((shmem_unit / "manifest.json").read_text())
    assert m["launch"]["func_attrs"] == {"set": [[8, DYN], [9, 25]], "cache_config": 2,
                                         "shared_config": None}


def test_a_unit_with_64_kib_replays_with_the_recorded_attributes(
        on_fake: FakeCuda, shmem_unit: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    log = _attrs_log(monkeypatch, tmp_path)
    out = run_isolated(shmem_unit, [NativeVariant(), NativeVariant(block=(64, 1, 1))],
                       repeat=2, warmup=1)
    assert [m.status.value for m in out["measurements"]] == ["OK", "OK"], out["measurements"]
    lines = log.read_text().splitlines()
    assert {"heat attr 8 65536", "heat attr 9 25", "heat cache 2"} <= set(lines)


def test_a_variants_carveout_wins_over_the_recorded_one(
        on_fake: FakeCuda, shmem_unit: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    log = _attrs_log(monkeypatch, tmp_path)
    out = run_isolated(shmem_unit, [NativeVariant(carveout=50)], repeat=1, warmup=0)
    assert out["measurements"][0].status.value == "OK"
    lines = log.read_text().splitlines()
    assert lines.index("heat attr 9 50") > lines.index("heat attr 9 25")  # set after it


def _without_func_attrs(unit: Path, to: Path) -> Path:
    """The unit as a recording made before attributes were recorded (no func_attrs)."""
    import shutil

    shutil.copytree(unit, to)
    m = json.loads((to / "manifest.json").read_text())
    del m["launch"]["func_attrs"]
    m.pop("checksum")
    m["checksum"] = manifest_checksum(m)
    (to / "manifest.json").write_text(json.dumps(m))
    return to


def test_an_older_unit_without_attributes_loads_and_replays(
        on_fake: FakeCuda, shmem_unit: Path, monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    old = _without_func_attrs(shmem_unit, tmp_path / "old")
    rec = read_native(old)
    assert rec.func_attrs == FuncAttrs() and not rec.func_attrs
    log = _attrs_log(monkeypatch, tmp_path)
    out = run_isolated(old, [NativeVariant()], repeat=1, warmup=0)
    assert out["measurements"][0].status.value == "OK", out["measurements"]
    assert log.read_text().splitlines() == ["heat attr 8 65536"]  # what its launch needs


def test_a_unit_of_a_program_that_set_nothing_sets_nothing(
        on_fake: FakeCuda, record_fake: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    status, units, _, _ = record_fake(tmp_path / "r", kernels="heat", max_instances=1)
    assert status == 0
    rec = read_native(units[0])
    assert not rec.func_attrs
    assert "func_attrs" not in json.loads((units[0] / "manifest.json").read_text())["launch"]
    log = _attrs_log(monkeypatch, tmp_path)
    out = run_isolated(units[0], [NativeVariant()], repeat=1, warmup=0)
    assert out["measurements"][0].status.value == "OK"
    assert not log.exists()


def test_a_deployed_replacement_with_64_kib_launches(
        on_fake: FakeCuda, shmem_unit: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    from kernforge.deploy import native as nd

    rec = read_native(shmem_unit)
    image = on_fake.image(tuned=True)
    e = nd.entry(rec, {"block": [64, 1, 1]}, "tuned.bin", image, {"speedup": 1.5})
    assert e["carveout"] == 25  # the program's, as its replay ran
    spec = nd.write_spec(tmp_path / "spec.json", [e], {"tuned.bin": image})
    log = _attrs_log(monkeypatch, tmp_path)
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command(10, 1000, "shmem")]) == 0
    out = capfd.readouterr()
    lines = log.read_text().splitlines()
    assert out.out == _plain(on_fake, "shmem")
    assert "10 launch(es) ran a tuned configuration" in out.err, out.err
    # the program's three on its heat, then the replacement's carveout and limit
    assert lines == ["heat attr 8 65536", "heat attr 9 25", "heat cache 2", "heat attr 9 25",
                     "heat attr 8 65536"]


def test_a_sequence_of_64_kib_launches_records_and_replays_them(
        on_fake: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernforge.pipeline.run_app import record_command

    status, units, problems, _ = record_command(on_fake.command(10, 1000, "shmem"),
                                                tmp_path / "r", kernels="heat",
                                                max_instances=1, sequence=4)
    assert status == 0 and not problems and len(units) == 1
    rec = read_native(units[0])
    assert rec.is_sequence and len(rec.steps) == 4
    assert all(s.func_attrs == FuncAttrs(((8, DYN), (9, 25)), cache_config=2)
               for s in rec.steps)
    log = _attrs_log(monkeypatch, tmp_path)
    out = run_isolated(units[0], [NativeVariant()], repeat=1, warmup=0)
    assert out["measurements"][0].status.value == "OK", out["measurements"]
    assert "heat attr 8 65536" in log.read_text().splitlines()


def test_a_library_kernels_attributes_are_recorded(
        on_fake: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Set through cuKernelSetAttribute / cuKernelSetCacheConfig, launched through the function
    cuKernelGetFunction gave (fake_lib_app.c)."""
    from kernforge.pipeline.run_app import record_command

    exe = tmp_path / "fake_lib_app"
    done = subprocess.run(["cc", "-O1", "-o", str(exe), str(Path(__file__).with_name(
        "fake_lib_app.c")), "-ldl"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    status, units, problems, _ = record_command([str(exe), str(on_fake.kernels), "3"],
                                                tmp_path / "r", max_instances=1)
    assert status == 0 and not problems and len(units) == 1
    rec = read_native(units[0])
    assert rec.func_attrs == FuncAttrs(((8, DYN),), cache_config=1)
    log = _attrs_log(monkeypatch, tmp_path)
    out = run_isolated(units[0], [NativeVariant()], repeat=1, warmup=0)
    assert out["measurements"][0].status.value == "OK", out["measurements"]
    assert log.read_text().splitlines() == ["heat attr 8 65536", "heat cache 1"]


def test_what_a_launch_gets_set() -> None:
    none = FuncAttrs()
    assert none.for_launch(0) == () and none.for_launch(48 * 1024) == ()
    assert none.for_launch(DYN) == ((8, DYN),)  # an older unit: what the program must have set
    raised = FuncAttrs(((8, 100 * 1024), (9, 0)))
    assert raised.for_launch(DYN) == ((8, 100 * 1024), (9, 0))  # the recorded value covers it
    low = FuncAttrs(((8, 1024), (9, 0)))  # set, then launched with more: raised to the launch's
    assert low.for_launch(DYN) == ((9, 0), (8, DYN))
    assert FuncAttrs.from_json(FuncAttrs(((8, 1),), 2, 1).to_json()) == FuncAttrs(((8, 1),), 2, 1)


def test_a_damaged_func_attrs_is_a_format_error(shmem_unit: Path, tmp_path: Path) -> None:
    from kernforge.core import RecordingFormatError

    bad = _without_func_attrs(shmem_unit, tmp_path / "bad")
    m = json.loads((bad / "manifest.json").read_text())
    m["launch"]["func_attrs"] = {"set": [[8]]}
    m.pop("checksum")
    m["checksum"] = manifest_checksum(m)
    (bad / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RecordingFormatError, match="malformed value"):
        read_native(bad)
