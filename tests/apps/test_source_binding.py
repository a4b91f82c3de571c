"""[integrate] sources: a recorded native unit of the fake program bound to the CUDA file that
defines its kernel (in a local header), stored in the unit, then lifted from that source by
M3a's child on the fake driver; the typed refusals (a kernel no file defines, a missing
file, a malformed define)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernforge.apps.lift_includes import kernels_defined, native_text, translation_unit
from kernforge.apps.manifest import AppManifestError, Integrate, load_manifest
from kernforge.apps.operator_match import NoMatch, lift_unit
from kernforge.apps.source_binding import SourceBindingError, bind_units
from kernforge.apps.store import AppStore
from kernforge.apps.strategies.tune import has_source
from kernforge.apps.workflow import AppRun
from kernforge.record.native_format import read_native
from kernforge.testing.fakedriver import FakeCuda

from .app_helpers import fake_program, write_manifest

HEADER = """#define AT(i) ((i) + OFFSET)
__global__ void heat(const double *__restrict__ in, double *__restrict__ out, int n,
                     double c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (i == 0 || i == n - 1) { out[AT(i)] = in[AT(i)]; return; }
  out[AT(i)] = in[AT(i)] + c * (in[AT(i - 1)] - 2 * in[AT(i)] + in[AT(i + 1)]);
}
"""
OTHER = "__global__ void scale2(double *x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2; }\n"


@pytest.fixture(scope="module")
def recorded(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    out = tmp_path_factory.mktemp("rec")
    status, _, problems, _ = record_fake(out, max_instances=1)
    assert status == 0 and not problems
    return out / "heat-0"


def _program(root: Path) -> tuple[Path, Path]:
    (root / "inc").mkdir(parents=True)
    (root / "inc" / "heat.cuh").write_text(HEADER)
    main = root / "main.cu"
    main.write_text('#include <cstdio>\n#include "heat.cuh"\nint main() { return 0; }\n')
    other = root / "other.cu"
    other.write_text(OTHER)
    return main, other


def test_a_unit_is_bound_to_the_file_defining_its_kernel_and_lifted_from_it(
        recorded: Path, fake: FakeCuda, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unit = tmp_path / "rec" / "heat-0"
    shutil.copytree(recorded, unit)
    main, other = _program(tmp_path / "src")
    assert read_native(unit).source is None and not has_source(unit, "native")
    integ = Integrate(sources=(other, main), includes=(tmp_path / "src" / "inc",),
                      defines=("OFFSET=0",))
    got = bind_units([unit], integ)
    assert got == {str(unit): f"bound to {main}"}
    src = read_native(unit, verify=True).source
    assert src is not None and src.origin == "nvcc" and src.code == main.read_text()
    assert f"-I{tmp_path / 'src' / 'inc'}" in src.options and "-DOFFSET=0" in src.options
    assert has_source(unit, "native")  # M3b evolves it
    code, defines = native_text(src)
    assert "__global__ void heat" in code and defines == ("OFFSET=0",)
    assert bind_units([unit], integ) == {str(unit): "has its own source (nvcc)"}
    monkeypatch.setenv("KERNFORGE_LIBCUDA", str(fake.libdir / "libcuda.so.1"))
    m = lift_unit(unit, out_dir=tmp_path / "l", repeat=2, passes=1)
    assert isinstance(m, NoMatch), m  # the fake driver runs no generated image
    assert m.recognized and m.recognized.startswith("lifted from source: 1D fp64"), m


def test_a_kernel_no_source_defines_is_refused_with_what_they_define(
        recorded: Path, tmp_path: Path) -> None:
    unit = tmp_path / "heat-0"
    shutil.copytree(recorded, unit)
    _, other = _program(tmp_path / "src")
    with pytest.raises(SourceBindingError) as e:
        bind_units([unit], Integrate(sources=(other,)))
    assert "'heat'" in e.value.message and "other.cu: scale2" in e.value.message
    assert e.value.hint and read_native(unit).source is None
    assert bind_units([unit], Integrate()) == {}


def test_local_headers_are_inlined_once_and_system_ones_left_out(tmp_path: Path) -> None:
    (tmp_path / "a.h").write_text('#include "a.h"\n#include <vector>\n__global__ void k() {}\n')
    (tmp_path / "m.cu").write_text('#include "a.h"\n#include "a.h"\n#include "none.h"\n')
    text = translation_unit(tmp_path / "m.cu")
    assert text.count("__global__ void k") == 1 and "#include" not in text
    assert kernels_defined(text) == ["k"]
    assert kernels_defined("template <int B> __global__ void t(float *x) {}\n"
                           "__device__ float f() { return 1; }\n") == ["t"]


def _manifest(tmp_path: Path, integrate: str) -> Path:
    (tmp_path / "prog").mkdir(exist_ok=True)
    (tmp_path / "prog" / "main.cu").write_text(OTHER)
    p = tmp_path / "app.toml"
    p.write_text('name = "a"\nsource = "prog"\nbuild = "true"\n[[datasets]]\nname = "d"\n'
                 'run = "./a"\n[check]\nkind = "exit"\n[integrate]\n' + integrate)
    return p


def test_manifest_sources_are_relative_to_the_source_directory(tmp_path: Path) -> None:
    m = load_manifest(_manifest(tmp_path, 'sources = ["main.cu"]\nincludes = ["."]\n'
                                          'defines = ["N=4", "FAST"]\n'))
    assert m.integrate.sources == ((tmp_path / "prog" / "main.cu").resolve(),)
    assert m.integrate.includes == ((tmp_path / "prog").resolve(),)
    assert m.integrate.defines == ("N=4", "FAST")
    with pytest.raises(AppManifestError, match="sources: no file .*kernels.cu"):
        load_manifest(_manifest(tmp_path, 'sources = ["main.cu", "kernels.cu"]\n'))
    with pytest.raises(AppManifestError, match="includes: no directory"):
        load_manifest(_manifest(tmp_path, 'sources = ["main.cu"]\nincludes = ["inc"]\n'))
    with pytest.raises(AppManifestError, match="defines must be"):
        load_manifest(_manifest(tmp_path, 'sources = ["main.cu"]\ndefines = ["1X=2"]\n'))


def _app(tmp_path: Path, fake: FakeCuda, sources: str) -> Path:
    src = fake_program(tmp_path / "src")
    (src / "cuda").mkdir()
    (src / "cuda" / "heat.cuh").write_text(HEADER)
    (src / "cuda" / "main.cu").write_text('#include "heat.cuh"\n')
    (src / "cuda" / "other.cu").write_text(OTHER)
    m = write_manifest(tmp_path / "app.toml", src, fake)
    m.write_text(m.read_text().replace('strategies = ["operator", "tune", "agent"]',
                                       f'strategies = ["operator"]\n{sources}')
                 .replace("min_share = 0.0", "min_share = 0.99"))  # ends after M2
    return m


def test_m2_binds_every_recorded_unit_of_every_dataset(tmp_path: Path, fake: FakeCuda
                                                       ) -> None:
    m = _app(tmp_path, fake, 'sources = ["cuda/other.cu", "cuda/main.cu"]\n'
                             'defines = ["OFFSET=0"]')
    assert AppRun(load_manifest(m), tmp_path / "run").run().state == "OUT_OF_SCOPE"
    m2 = AppStore.open(tmp_path / "run").milestone("M2")
    assert m2 is not None and "native unit(s) bound to their source" in m2.reason, m2.reason
    bound = m2.figures["sources"]
    assert {Path(u).parent.name for u in bound} == {"small", "large"}
    heat = [u for u in bound if Path(u).name.startswith("heat-")]
    assert len(heat) == 2, bound  # one unit of heat per dataset
    for unit in heat:
        assert bound[unit].endswith("main.cu"), bound[unit]
        src = read_native(unit).source
        assert src is not None and "-DOFFSET=0" in src.options
    assert all("defined in none" in bound[u] for u in bound if u not in heat)


def test_m2_fails_when_no_source_defines_a_recorded_kernel(tmp_path: Path, fake: FakeCuda
                                                           ) -> None:
    m = _app(tmp_path, fake, 'sources = ["cuda/other.cu"]')
    with pytest.raises(SourceBindingError, match="defined in none of"):
        AppRun(load_manifest(m), tmp_path / "run").run()
    m2 = AppStore.open(tmp_path / "run").milestone("M2")
    assert m2 is not None and m2.status == "FAILED" and "scale2" in m2.reason
