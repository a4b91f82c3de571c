"""The CUDA red-team catalog: static expectations (here), nvcc builds (where nvcc is), and
the whole suite on the GPU (``pytest -m gpu``)."""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kernforge.core import KernelSource
from kernforge.harness.static_checks import RULES, new_findings
from kernforge.testing.redteam import record_bases, run_cheat
from kernforge.testing.redteam_cuda import BASES, CHEATS, NOT_BUILDING

FAKE = SimpleNamespace(prologue=lambda name: np.linspace(0.1, 0.9, 4096),
                       expected=lambda name: np.array([12.5]))
_BASES = {b.name: b for b in BASES}


def _code(cheat) -> str | None:
    return cheat.code(FAKE) if callable(cheat.code) else cheat.code


@pytest.mark.parametrize("cheat", CHEATS, ids=[c.name for c in CHEATS])
def test_static_expectations_of_each_cuda_cheat(cheat) -> None:
    code = _code(cheat)
    if code is None:
        return  # a launch cheat: the recorded source
    base = _BASES[cheat.base]
    found = new_findings(KernelSource(code, base.entry, "cuda"),
                         KernelSource(base.code, base.entry, "cuda"))
    first = min(found, key=lambda f: (RULES.index(f.rule), f.line)).reason if found else None
    assert first == (cheat.reason if cheat.reason.startswith("static:") else None)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed here")
def test_cuda_sources_build_for_sm90(tmp_path: Path) -> None:
    sources = {f"base_{b.name}": b.code for b in BASES}
    sources.update({c.name: _code(c) for c in CHEATS if c.code is not None})

    def build(item: tuple[str, str]) -> tuple[str, int, str]:
        name, code = item
        src = tmp_path / f"{name}.cu"
        src.write_text(code)
        p = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / f"{name}.cubin"),
                            str(src)], check=False, capture_output=True, text=True, timeout=300)
        return name, p.returncode, p.stderr

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(build, sources.items()))
    for name, rc, err in results:
        assert (rc != 0) == (name in NOT_BUILDING), f"{name}: {err}"


@pytest.fixture(scope="module")
def gpu_recordings(tmp_path_factory: pytest.TempPathFactory):
    from kernforge.core import BackendUnavailableError

    try:
        return record_bases(tmp_path_factory.mktemp("redteam-gpu"), BASES, "cuda")
    except BackendUnavailableError as exc:
        pytest.skip(str(exc))


@pytest.mark.gpu
@pytest.mark.parametrize("cheat", CHEATS, ids=[c.name for c in CHEATS])
def test_gpu_cheat_is_rejected_with_the_right_reason(cheat, gpu_recordings) -> None:
    row = run_cheat(cheat, gpu_recordings)
    assert row.verdict == "rejected", row.message
    assert (row.status, row.reason) in {(cheat.status, r) for r in cheat.reasons}, row.message


GPU_DYNAMIC = [c for c in CHEATS if c.dynamic is not None]


@pytest.mark.gpu
@pytest.mark.parametrize("cheat", GPU_DYNAMIC, ids=[c.name for c in GPU_DYNAMIC])
def test_gpu_dynamic_gates_catch_it_without_static_checks(cheat, gpu_recordings) -> None:
    row = run_cheat(cheat, gpu_recordings, static=False)
    assert row.verdict == "rejected", row.message
    assert row.reason in (cheat.dynamic, *cheat.dynamic_also), row.message
