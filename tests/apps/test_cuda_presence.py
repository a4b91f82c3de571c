"""A CUDA program on a machine without a usable CUDA device: ``app run`` refuses it before
anything runs (exit 3, resumable), ``app batch`` leaves it unstarted (not finished: the same
batch on a GPU machine runs it), instead of a BLOCKED "fails its own check" from whatever the
program's unchecked CUDA calls printed. The device is the fake driver's
(kernforge/testing/fakecuda) or none (``KERNFORGE_LIBCUDA`` naming a library that is not
there)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernforge.apps import cuda_presence
from kernforge.apps.batch_store import BatchStore
from kernforge.apps.manifest import load_manifest
from kernforge.cli.main import main
from kernforge.testing.fakedriver import FakeCuda


def _run(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exc:
        return int(exc.code or 0)


def _manifest(root: Path, *, cuda: bool = True) -> Path:
    """A program that, as stencil1d does without a device, exits 0 and prints FAIL."""
    src = root / "prog"
    src.mkdir(parents=True)
    (src / ("stencil.cu" if cuda else "stencil.c")).write_text("int main() { return 0; }\n")
    path = root / "prog.toml"
    path.write_text(textwrap.dedent(f"""
        name = "prog"
        source = "{src}"
        build = "true"

        [[datasets]]
        name = "d0"
        run = "sh -c 'echo Error at 14 / FAIL'"

        [check]
        kind = "regex"
        pattern = '^PASS$'
        """))
    return path


@pytest.fixture
def no_device(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(tmp_path / "absent" / "libcuda.so.1"))


def test_app_run_refuses_a_cuda_program_without_a_device_before_it_runs(
        no_device: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _manifest(tmp_path)
    out = tmp_path / "run"
    assert _run("app", "run", str(path), "--out", str(out)) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "prog is a CUDA program (it has CUDA sources (stencil.cu)) and no CUDA device " \
           "is usable on this machine: the CUDA driver" in err
    assert "hint: run it on a machine with an NVIDIA GPU" in err and "Traceback" not in err
    assert not (out / "logs").exists()  # nothing was built or run


def test_a_program_without_cuda_sources_is_not_asked_for_a_device(
        no_device: None, tmp_path: Path) -> None:
    assert cuda_presence.gpu_refusal(load_manifest(_manifest(tmp_path, cuda=False))) is None


def test_the_batch_leaves_it_unstarted_and_a_machine_with_a_device_runs_it(
        no_device: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: FakeCuda,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = _manifest(tmp_path)
    out = tmp_path / "batch"
    assert _run("app", "batch", str(path), "--out", str(out)) == 1  # left unfinished
    said = " ".join(capsys.readouterr().out.split())
    assert "prog: SKIPPED: not started: prog is a CUDA program" in said
    store = BatchStore.open(out)
    try:
        (p,) = store.programs()
        assert (p.status, p.attempts) == ("PENDING", 0)
    finally:
        store.close()
    # the same command where the driver sees a device: the program runs (and fails its
    # own check: its output says FAIL)
    monkeypatch.delenv("KERNFORGE_LIBCUDA")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake.libdir))
    assert _run("app", "batch", str(path), "--out", str(out)) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "prog: FAILED (BLOCKED)" in said and "fails its own check" in said


def test_a_prebuilt_binary_with_device_code_is_a_cuda_program(no_device: None,
                                                              tmp_path: Path) -> None:
    """A suite run from prebuilt binaries (benchmarks/hecbench/manifests: build = "true", no
    sources beside them) is told by nvcc's section in the executable, found across a read's
    boundary; the CPU example is not asked for a device."""
    src = tmp_path / "bin"
    src.mkdir()
    (src / "cuda-app").write_bytes(b"\x7fELF" + b"\0" * ((1 << 20) - 7) + b".nv_fatbin\0")
    (src / "host-app").write_bytes(b"\x7fELF" + b"\0" * 4096 + b".text\0")
    for exe, cuda in (("cuda-app", True), ("host-app", False)):
        path = tmp_path / f"{exe}.toml"
        path.write_text(f'name = "{exe}"\nsource = "{src}"\nbuild = "true"\n[[datasets]]\n'
                        f'name = "d"\nrun = "./{exe} 10"\n[check]\nkind = "exit"\n')
        why = cuda_presence.gpu_refusal(load_manifest(path))
        assert (why is not None and "./cuda-app holds CUDA device code" in why) == cuda, exe
    example = Path(__file__).resolve().parents[2] / "examples" / "apps" / "heat3d_cpu.toml"
    assert cuda_presence.gpu_refusal(load_manifest(example)) is None
