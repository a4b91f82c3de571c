"""NVRTC capture by the driver interposer, against the fake driver and the fake NVRTC."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture
def on_fake(fake: FakeCuda, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    for k in ("LD_LIBRARY_PATH", "KERNFORGE_LIBNVRTC", "KFFAKE_NVRTC_DIR"):
        monkeypatch.setenv(k, fake.env[k])
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    return fake


def _plain(fake: FakeCuda, *args: str) -> str:
    return subprocess.run(fake.nvrtc_command(*args), env=fake.env, capture_output=True,
                          text=True, check=True).stdout  # type: ignore[arg-type]


@pytest.mark.parametrize("output", ["cubin", "ptx"])
def test_a_run_time_compiled_kernel_keeps_its_source(
        on_fake: FakeCuda, tmp_path: Path, capfd: pytest.CaptureFixture[str],
        output: str) -> None:
    extra = ("ptx",) if output == "ptx" else ()
    status, units, problems, _ = record_command(on_fake.nvrtc_command(3, 1000, *extra),
                                                tmp_path, max_instances=1)
    assert status == 0 and not problems
    assert capfd.readouterr().out == _plain(on_fake, "3", "1000", *extra)  # type: ignore[arg-type]
    rec = read_native(units[0])
    assert rec.entry == "axpy_float" and rec.image_kind == ("ptx" if extra else "text")
    src = rec.source
    assert src is not None and src.origin == "nvrtc" and src.output == output
    assert "v = a * x[i] + y[i]" in src.code and "caf\u00e9" in src.code  # UTF-8 kept
    assert src.headers == (("kf_fake.h", src.headers[0][1]),) and "THREADS" in src.headers[0][1]
    assert src.options == ("-arch=sm_90", "-DKF_FAKE=1", "--std=c++17")
    assert src.name_expression == "axpy<float>"
    assert src.library == str(on_fake.nvrtc) and src.compiler_version == (12, 9)
    m = json.loads((units[0] / "manifest.json").read_text())
    assert m["source"]["name_expressions"] == [{"expression": "axpy<float>",
                                                "lowered": "axpy_float"}]


def test_units_without_nvrtc_have_no_source(on_fake: FakeCuda, tmp_path: Path) -> None:
    _, units, _, _ = record_command(on_fake.command(2, 100), tmp_path, kernels="heat")
    assert units and all(read_native(u).source is None for u in units)


def test_an_edited_source_does_not_load(on_fake: FakeCuda, tmp_path: Path) -> None:
    from kernforge.core import RecordingFormatError
    from kernforge.record._layout import manifest_checksum
    _, units, _, _ = record_command(on_fake.nvrtc_command(1, 100), tmp_path)
    path = units[0] / "manifest.json"
    m = json.loads(path.read_text())
    m["source"]["code"] += "\n// edited"
    m["checksum"] = manifest_checksum(m)
    path.write_text(json.dumps(m))
    with pytest.raises(RecordingFormatError, match="code_sha256"):
        read_native(units[0])


def test_inspect_shows_the_captured_source(on_fake: FakeCuda, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from kernforge.cli.main import main
    record_command(on_fake.nvrtc_command(1, 100), tmp_path)
    capsys.readouterr()
    assert main(["inspect", str(tmp_path)]) == 0
    assert "nvrtc source" in capsys.readouterr().out
