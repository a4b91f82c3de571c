"""The public baselines (kernforge.stencil.baselines): torch conv3d and Halide, on the CPU here;
the same runners on a GPU under ``pytest -m gpu`` (the H200)."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from kernforge.core import BackendUnavailableError, ConfigError
from kernforge.stencil import baselines
from kernforge.stencil.baselines._arrays import inputs_by_role
from kernforge.stencil.baselines.torch_conv import kernel_array
from kernforge.stencil.spec import STENCILS, Cell, Precision, Shape

SMALL = Shape(20, 12, 9)  # nx, ny, nz: every extent different, so a transposed axis shows
PRECISIONS = ("fp16", "fp32", "fp64")


def reference(cell: Cell, a: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """The interior after all steps, float64, by shifted sums (independent of the oracle)."""
    st = cell.stencil
    r = st.radius
    nz, ny, nx = a.shape
    cur = a.astype(np.float64)

    def sweep(u: np.ndarray, skip_center: bool = False) -> np.ndarray:
        acc = np.zeros((nz - 2 * r, ny - 2 * r, nx - 2 * r))
        for w, (dz, dy, dx) in zip(st.weights, st.offsets, strict=True):
            if not (skip_center and (dz, dy, dx) == (0, 0, 0)):
                acc += w * u[r + dz:nz - r + dz, r + dy:ny - r + dy, r + dx:nx - r + dx]
        return acc

    if st.kind == "varcoeff":
        assert c is not None
        inner = (slice(r, -r),) * 3
        return st.weights[0] * cur[inner] + c.astype(np.float64)[inner] * sweep(cur, True)
    for _ in range(st.steps - 1):
        cur = cur.copy()
        cur[r:-r, r:-r, r:-r] = sweep(cur)
    return sweep(cur)


def fields(cell: Cell, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = cell.shape.array_shape
    return {role: rng.random(shape).astype(cell.precision.dtype) for role in ("in", "coef")}


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    out = np.asarray(out, dtype=np.float64)
    assert out.shape == ref.shape
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def cells(shape: Shape = SMALL, precisions: tuple[str, ...] = PRECISIONS) -> list[Cell]:
    return [Cell(st, shape, Precision(p)) for st in STENCILS.values() for p in precisions]


def ids(cs: list[Cell]) -> list[str]:
    return [c.id for c in cs]


# ---- the registry and the input checks -------------------------------------------------------
def test_available_reports_every_baseline() -> None:
    got = baselines.available("cpu")
    assert set(got) == set(baselines.NAMES)
    assert all(v is None or isinstance(v, str) for v in got.values())


def test_unknown_baseline() -> None:
    cell = Cell(STENCILS["star_1"], SMALL, Precision.FP32)
    with pytest.raises(ConfigError):
        baselines.make_runner("nope", cell, fields(cell))


def test_missing_halide_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "halide", None)
    cell = Cell(STENCILS["star_1"], SMALL, Precision.FP32)
    with pytest.raises(BackendUnavailableError) as exc:
        baselines.make_runner("halide", cell, fields(cell), target="host")
    assert exc.value.hint


def test_inputs_are_checked() -> None:
    cell = Cell(STENCILS["varcoeff_star_1"], SMALL, Precision.FP32)
    f = fields(cell)
    with pytest.raises(ConfigError, match="coef"):
        inputs_by_role(cell, f["in"])
    with pytest.raises(ConfigError, match="shape"):
        inputs_by_role(cell, {"in": f["in"].T, "coef": f["coef"]})
    with pytest.raises(ConfigError, match="float64"):
        inputs_by_role(cell, {"in": f["in"].astype(np.float64), "coef": f["coef"]})
    assert set(inputs_by_role(cell, {**f, "out": f["in"]})) == {"in", "coef"}


# ---- the correlation kernel ------------------------------------------------------------------
@pytest.mark.parametrize("name", list(STENCILS))
def test_kernel_array_layout(name: str) -> None:
    spec = STENCILS[name]
    k = kernel_array(spec)
    r = spec.radius
    assert k.shape == (2 * r + 1,) * 3
    assert np.isclose(k.sum(), 1.0)
    assert np.count_nonzero(k) == spec.points  # star: zeros off the axes
    for w, (dz, dy, dx) in zip(spec.weights, spec.offsets, strict=True):
        assert k[dz + r, dy + r, dx + r] == w
    assert kernel_array(spec, drop_center=True)[r, r, r] == 0.0


# ---- torch (CPU) -----------------------------------------------------------------------------
def test_torch_conv3d_is_a_correlation() -> None:
    """An impulse at p + o shows up at p with weight w(o), not w(-o) (weights are distinct)."""
    pytest.importorskip("torch")
    centre = (4, 4, 4)
    for name, off in (("box_2", (1, 0, -2)), ("star_2", (0, 0, 2)), ("star_2", (1, 0, -2))):
        cell = Cell(STENCILS[name], Shape(9, 9, 9), Precision.FP64)
        a = np.zeros(cell.shape.array_shape)
        a[tuple(c + o for c, o in zip(centre, off, strict=True))] = 1.0
        runner = baselines.make_runner("torch", cell, a)
        runner.run()
        r = cell.radius
        weights = dict(zip(cell.stencil.offsets, cell.stencil.weights, strict=True))
        got = runner.output()[centre[0] - r, centre[1] - r, centre[2] - r]
        assert got == pytest.approx(weights.get(off, 0.0), abs=0), (name, off)


@pytest.mark.parametrize("cell", cells(), ids=ids(cells()))
def test_torch_cpu_matches_reference(cell: Cell) -> None:
    pytest.importorskip("torch")
    f = fields(cell)
    runner = baselines.make_runner("torch", cell, f)
    assert (runner.name, runner.output_region, runner.synchronous) == ("torch", "interior", False)
    runner.run()
    assert rel_error(runner.output(), reference(cell, f["in"], f["coef"])) \
        < cell.precision.tolerance


@pytest.mark.parametrize("name", ["star_1_t4", "varcoeff_star_1", "box_2"])
def test_torch_reads_inputs_changed_in_place(name: str) -> None:
    pytest.importorskip("torch")
    cell = Cell(STENCILS[name], SMALL, Precision.FP32)
    f = fields(cell, 1)
    runner = baselines.make_runner("torch", cell, f)
    for seed in (2, 3):
        for role, value in fields(cell, seed).items():
            f[role][...] = value  # the temporal boundary ring must follow the new input
        runner.run()
        assert rel_error(runner.output(), reference(cell, f["in"], f["coef"])) < 1e-5


# ---- Halide (CPU: the algorithm with a host schedule; GPU schedules lowered for CUDA) -------
@pytest.mark.parametrize("cell", cells(), ids=ids(cells()))
def test_halide_algorithm_on_host(cell: Cell) -> None:
    pytest.importorskip("halide")
    f = fields(cell)
    runner = baselines.make_runner("halide", cell, f, target="host")
    assert (runner.output_region, runner.synchronous) == ("interior", True)
    runner.run()
    assert rel_error(runner.output(), reference(cell, f["in"], f["coef"])) \
        < cell.precision.tolerance


def test_halide_reload_takes_new_inputs() -> None:
    pytest.importorskip("halide")
    cell = Cell(STENCILS["star_1_t4"], SMALL, Precision.FP32)
    src = fields(cell, 1)
    runner = baselines.make_runner("halide", cell, {"in": src["in"].copy()}, target="host")
    new = fields(cell, 5)["in"]
    runner.reload({"in": new})
    runner.run()
    assert rel_error(runner.output(), reference(cell, new)) < 1e-5


def test_large_temporal_grids_may_get_run_time_sizes_and_64_bit_buffers() -> None:
    """star_1_t4 at 1024^3 computes intermediate grids of 2 GiB (fp16) to 8 GiB (fp64): only
    those pipelines may fall back to ``large_buffers``; the target is unchanged otherwise."""
    from kernforge.stencil.baselines.halide_common import CUDA_TARGET, large_grids, target_for

    for prec in ("fp16", "fp32", "fp64"):
        assert large_grids(Cell.parse(f"star_1_t4/1024x1024x1024/{prec}"))
        for other in (f"star_1_t4/512x512x512/{prec}", f"star_1/1024x1024x1024/{prec}"):
            assert not large_grids(Cell.parse(other))
    assert target_for(CUDA_TARGET, True) == CUDA_TARGET + "-large_buffers"
    assert target_for("host-large_buffers", True) == "host-large_buffers"
    assert target_for(CUDA_TARGET, False) == CUDA_TARGET


def test_the_fixed_pipeline_comes_first_and_the_large_one_only_after_its_failure() -> None:
    """``build_fixed_or_large``: the fixed pipeline when it builds; for a 2 GiB cell whose
    fixed pipeline fails, the run-time-sized one, with the failure kept; elsewhere the error."""
    from kernforge.core import KernforgeError
    from kernforge.stencil.baselines.halide_common import build_fixed_or_large

    class Built:
        def __init__(self, large: bool) -> None:
            self.large = large
            self.info: dict = {}

    def fixed_fails(large: bool) -> Built:
        if not large:
            raise KernforgeError("Allocation size should be a positive number")
        return Built(large)

    big = Cell.parse("star_1_t4/1024x1024x1024/fp32")
    small = Cell.parse("star_1_t4/512x512x512/fp32")
    first = build_fixed_or_large(big, Built)  # type: ignore[arg-type]
    assert not first.large and first.info["run_time_extents"] is False
    second = build_fixed_or_large(big, fixed_fails)  # type: ignore[arg-type]
    assert second.large and second.info["run_time_extents"] is True
    assert "Allocation size" in second.info["fixed_extents_error"]
    with pytest.raises(KernforgeError, match="Allocation size"):
        build_fixed_or_large(small, fixed_fails)  # type: ignore[arg-type]

    def fixed_breaks_otherwise(large: bool) -> Built:
        if not large:
            raise KernforgeError("Halide device_malloc failed (error -3)")
        return Built(large)

    # any other failure of the fixed pipeline is the baseline's own: no silent fallback
    with pytest.raises(KernforgeError, match="device_malloc"):
        build_fixed_or_large(big, fixed_breaks_otherwise)  # type: ignore[arg-type]


@pytest.mark.parametrize("gpu_schedule", [False, True], ids=["host", "cuda"])
def test_halide_compiles_the_2_gib_temporal_pipeline_only_with_run_time_sizes(
        gpu_schedule: bool) -> None:
    """The hand-scheduled pipeline at 1024^3: with every extent fixed Halide refuses it at
    compile time ("Allocation size should be a positive number"); with the output extents left
    to the call and ``large_buffers`` it compiles, for the host or for CUDA (PTX only)."""
    pytest.importorskip("halide")
    from kernforge.stencil.baselines import halide_common, halide_hand

    cell = Cell.parse("star_1_t4/1024x1024x1024/fp16")
    for large in (False, True):
        alg = halide_common.define(cell, large)
        if gpu_schedule:
            halide_hand.schedule_gpu(alg)
            target = halide_common.target_for(halide_common.CUDA_TARGET, large)
        else:
            halide_common.schedule_cpu(alg)
            target = halide_common.target_for("host", large)
        pipeline = alg.hl.Pipeline(alg.output)
        if large:
            pipeline.compile_jit(alg.hl.Target(target))
        else:
            with pytest.raises(Exception, match="Allocation size"):
                pipeline.compile_jit(alg.hl.Target(target))


def test_halide_with_run_time_output_sizes_matches_the_reference() -> None:
    """The run-time-sized path of the 2 GiB pipelines (output extents unfixed,
    ``large_buffers``) on a small temporal cell, run on the host."""
    pytest.importorskip("halide")
    from kernforge.stencil.baselines import halide_common

    for prec in (Precision.FP32, Precision.FP16):
        cell = Cell(STENCILS["star_1_t4"], SMALL, prec)
        f = fields(cell, 3)
        alg = halide_common.define(cell, large=True)
        halide_common.schedule_cpu(alg)
        runner = halide_common.HalideRunner("halide", alg, halide_common.target_for("host", True),
                                            f)
        assert "large_buffers" in runner.info["target"]
        runner.run()
        assert rel_error(runner.output(), reference(cell, f["in"])) < cell.precision.tolerance


KERNEL_RUN = re.compile(r'halide_cuda_run\([^,]+, "(\w+)", (\d+), (\d+), (\d+), (\d+), (\d+), (\d+)')


def lowered_cuda(alg: object, tmp_path: object) -> str:
    """The lowered statement of ``alg`` for the CUDA target (PTX generated, nothing run)."""
    import halide as hl

    from kernforge.stencil.baselines.halide_common import CUDA_TARGET

    path = f"{tmp_path}/pipeline.stmt"
    hl.Pipeline(alg.output).compile_to_lowered_stmt(  # type: ignore[attr-defined]
        path, list(alg.params.values()), hl.StmtOutputFormat.Text,  # type: ignore[attr-defined]
        hl.Target(CUDA_TARGET))
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


GPU_SHAPE = Shape(70, 37, 29)  # ragged against every tile


@pytest.mark.parametrize("name", list(STENCILS))
def test_halide_hand_schedules_lower_for_cuda(name: str, tmp_path: object) -> None:
    pytest.importorskip("halide")
    from kernforge.stencil.baselines import halide_common, halide_hand

    cell = Cell(STENCILS[name], GPU_SHAPE, Precision.FP32)
    for sched in halide_hand.CANDIDATES:
        alg = halide_common.define(cell)
        halide_hand.schedule_gpu(alg, sched)
        stmt = lowered_cuda(alg, tmp_path)
        launches = KERNEL_RUN.findall(stmt)
        # one launch per computed Func, its grid covering z: no host loop over z slices
        assert len(launches) == len(alg.funcs), sched.key
        assert ".version" in stmt and "sm_86" in stmt  # the PTX was generated
        for (_entry, *dims), func in zip(launches, alg.funcs, strict=True):
            gz, tz = int(dims[2]), int(dims[5])
            assert gz * tz * max(1, sched.zloop) >= alg.extent(func)[2], sched.key
        if sched.shared and not alg.stages:
            assert "GPUShared" in stmt or ".shared" in stmt


@pytest.mark.parametrize("prec", ["fp16", "fp64"])
def test_halide_hand_precisions_lower_for_cuda(prec: str, tmp_path: object) -> None:
    pytest.importorskip("halide")
    from kernforge.stencil.baselines import halide_common, halide_hand

    for name in ("star_1", "varcoeff_star_1", "star_1_t4"):
        alg = halide_common.define(Cell(STENCILS[name], GPU_SHAPE, Precision(prec)))
        halide_hand.schedule_gpu(alg)
        assert KERNEL_RUN.search(lowered_cuda(alg, tmp_path))


@pytest.mark.parametrize("name", list(STENCILS))
def test_halide_auto_schedules_and_lowers_for_cuda(name: str, tmp_path: object) -> None:
    pytest.importorskip("halide")
    from kernforge.stencil.baselines import halide_auto, halide_common

    cell = Cell(STENCILS[name], GPU_SHAPE, Precision.FP32)
    alg = halide_common.define(cell)
    info = halide_auto.autoschedule(alg)
    assert info["autoschedule_seconds"] < 120
    assert "gpu_blocks" in info["schedule"]
    assert info["autoscheduler_params"]["beam_size"] == ("1" if cell.stencil.temporal else "32")
    assert KERNEL_RUN.search(lowered_cuda(alg, tmp_path))


def test_halide_auto_needs_a_gpu_target() -> None:
    pytest.importorskip("halide")
    cell = Cell(STENCILS["star_1"], SMALL, Precision.FP32)
    with pytest.raises(Exception, match="GPU"):
        baselines.make_runner("halide_auto", cell, fields(cell), target="host")


# ---- on the GPU (pytest -m gpu) --------------------------------------------------------------
def gpu_cells() -> list[Cell]:
    out = [Cell(st, GPU_SHAPE, Precision.FP32) for st in STENCILS.values()]
    out += [Cell(STENCILS[n], GPU_SHAPE, Precision(p)) for n in ("star_1", "box_1", "star_1_t4")
            for p in ("fp16", "fp64")]
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("name", baselines.NAMES)
@pytest.mark.parametrize("cell", gpu_cells(), ids=ids(gpu_cells()))
def test_baseline_on_gpu_matches_reference(name: str, cell: Cell) -> None:
    cp = pytest.importorskip("cupy")
    reason = baselines.available("cuda")[name]
    if reason:
        pytest.skip(reason)
    f = fields(cell, 7)
    dev = {role: cp.asarray(a) for role, a in f.items()}
    runner = baselines.make_runner(name, cell, dev)
    runner.run()
    cp.cuda.runtime.deviceSynchronize()
    ref = reference(cell, f["in"], f["coef"])
    out = runner.output()
    host = out.get() if hasattr(out, "get") else np.asarray(out)
    assert rel_error(host, ref) < cell.precision.tolerance
    # fresh inputs in place: torch reads them at every run, Halide after reload()
    g = fields(cell, 8)
    for role, arr in dev.items():
        arr[...] = cp.asarray(g[role])
    if getattr(runner, "reload_inputs", False):
        runner.reload()
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:  # torch follows CuPy's current stream
        runner.run()
        out = runner.output()
    stream.synchronize()
    host = out.get() if hasattr(out, "get") else np.asarray(out)
    assert rel_error(host, reference(cell, g["in"], g["coef"])) < cell.precision.tolerance


def test_own_reference_agrees_with_the_oracle() -> None:
    oracle = pytest.importorskip("kernforge.stencil.oracle")
    for cell in cells(precisions=("fp64",)):
        f = fields(cell, 3)
        coef = f["coef"] if cell.stencil.kind == "varcoeff" else None
        full = oracle.reference(cell, f["in"], coef)
        r = cell.radius
        assert np.allclose(full[r:-r, r:-r, r:-r], reference(cell, f["in"], f["coef"]))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["halide", "halide_auto"])
def test_halide_runs_the_2_gib_temporal_cell_on_gpu(name: str) -> None:
    """star_1_t4 at 1024^3 in fp16 (intermediate grids of 2 GiB): both Halide baselines build
    and pass the sampled oracle check on the GPU."""
    pytest.importorskip("cupy")
    reason = baselines.available("cuda")[name]
    if reason:
        pytest.skip(reason)
    from kernforge.forge.oracle_check import check
    from kernforge.stencil import oracle

    cell = Cell.parse("star_1_t4/1024x1024x1024/fp16")
    f = oracle.random_fields(cell, seed=11)
    runner = baselines.make_runner(name, cell, f)
    # in fp16 both fixed pipelines fail to build (H200, session 9): the run-time-sized one runs
    assert runner.info["run_time_extents"] and "large_buffers" in runner.info["target"]
    runner.run()
    res = check(cell, f, runner.output(), seed=11)
    assert res.ok, res


@pytest.mark.gpu
def test_the_autoscheduler_keeps_the_fixed_pipeline_where_it_builds() -> None:
    """star_1_t4 1024^3 fp32: Anderson2021 builds the fixed pipeline (14.7 ms on the H200,
    against 108 ms run-time-sized), so the baseline must not fall back."""
    pytest.importorskip("cupy")
    reason = baselines.available("cuda")["halide_auto"]
    if reason:
        pytest.skip(reason)
    from kernforge.forge.oracle_check import check
    from kernforge.stencil import oracle

    cell = Cell.parse("star_1_t4/1024x1024x1024/fp32")
    f = oracle.random_fields(cell, seed=12)
    runner = baselines.make_runner("halide_auto", cell, f)
    assert runner.info["run_time_extents"] is False
    assert "large_buffers" not in runner.info["target"]
    runner.run()
    assert check(cell, f, runner.output(), seed=12).ok
