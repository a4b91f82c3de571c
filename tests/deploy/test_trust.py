"""Only verified, idle-measured, significant and unaltered wins are exported and deployed, and
the deploying process re-verifies each tuned variant on its first launch (issue 32, items 1-2).
The reproductions of the issue: a result measured while busy, an interval that includes 1, a
noise-sized win, an edited result, an edited spec, and a wrong variant in a signed spec."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from deploy_helpers import axpy_entry, axpy_kernel, record_axpy, write_result

from kernforge import deploy
from kernforge.deploy import DeploySpec, write_spec
from kernforge.deploy.gate import refusal
from kernforge.deploy.reverify import Unverifiable, reverify
from kernforge.pipeline.export import collect
from kernforge.record import find_recordings, load_recording

pytestmark = pytest.mark.reverify
ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "heat3d_cpu.py"
APP_ARGS = ["--n", "16", "--steps", "4"]
TUNED = {"defines": {"BIAS": 0}, "options": {}}


def run_axpy(n: int = 4) -> np.ndarray:
    y = np.ones(n)
    axpy_kernel()(np.arange(float(n)), y, 2.0, n)
    return y


# ---- export ---------------------------------------------------------------------------------
def test_export_refuses_busy_insignificant_and_altered_results(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    run = tmp_path / "run"
    write_result(run / "busy", rec, TUNED, speedup=31.747, ci=(9.162, 36.975), idle=False)
    write_result(run / "includes-1", rec, TUNED, speedup=2.55, ci=(0.99, 5.34))
    write_result(run / "noise", rec, TUNED, speedup=1.001, ci=(1.0005, 1.004))
    edited = write_result(run / "edited", rec, TUNED, speedup=3.0, ci=(2.5, 3.5))
    doc = json.loads(edited.read_text())
    doc["best"]["variant"]["defines"] = {"CENTER_WEIGHT": "5.0"}
    edited.write_text(json.dumps(doc))
    unsigned = write_result(run / "unsigned", rec, TUNED, speedup=3.0, ci=(2.5, 3.5))
    doc = json.loads(unsigned.read_text())
    del doc["checksum"]
    unsigned.write_text(json.dumps(doc))
    exported, skipped = collect(run, 1.0)
    assert exported == []
    why = {Path(s.split(":", 1)[0]).parent.name: s.split(":", 1)[1] for s in skipped}
    assert "busy" in why["busy"] and "idle machine" in why["busy"]
    assert "inconclusive" in why["includes-1"] and "0.990" in why["includes-1"]
    assert "not faster" in why["noise"] and "2% noise band" in why["noise"]
    assert "altered after it was written" in why["edited"]
    assert "not signed" in why["unsigned"]
    write_result(run / "good", rec, TUNED, speedup=2.0, ci=(1.8, 2.2))
    exported, _ = collect(run, 1.0)
    assert [ex.result.parent.name for ex in exported] == ["good"]
    ev = exported[0].entry.evidence
    assert ev.verified is True and ev.idle is True


def test_the_gate_states_its_rule() -> None:
    assert refusal(verified=True, idle=True, speedup=1.2, ci=(1.1, 1.3)) is None
    assert refusal(verified=True, idle=None, speedup=1.2, ci=(1.1, 1.3)) is None  # no probe
    assert refusal(verified=True, idle=True, speedup=1.03, ci=(1.015, 1.05)) is not None
    assert refusal(verified=True, idle=True, speedup=1.03, ci=(1.015, 1.05), band=0.01) is None
    assert "not verified" in str(refusal(verified=False, idle=True, speedup=2.0,
                                         ci=(1.9, 2.1)))


# ---- the deploying process ------------------------------------------------------------------
def test_a_wrong_variant_in_a_signed_spec_is_refused_on_its_first_launch(tmp_path: Path
                                                                          ) -> None:
    rec = record_axpy(tmp_path / "rec")
    plain = run_axpy()
    spec = write_spec(tmp_path / "d.json", [axpy_entry(rec)])  # BIAS=100: other results
    with deploy.use(spec, verify="require"):
        out = run_axpy()
        again = run_axpy()
    np.testing.assert_array_equal(out, plain)  # the original ran, each time
    np.testing.assert_array_equal(again, plain)
    counts = deploy.report().kernels["axpy"]
    assert counts.replaced == 0 and counts.reasons == {"re-verification": 2}


def test_an_equivalent_variant_is_verified_once_and_deployed(tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture
                                                             ) -> None:
    rec = record_axpy(tmp_path / "rec")
    plain = run_axpy()
    entry = axpy_entry(rec, defines={"BIAS": "0"})
    with caplog.at_level("INFO", logger="kernforge.deploy"), \
            deploy.use(DeploySpec((entry,)), verify="require"):
        outs = [run_axpy() for _ in range(3)]
    for o in outs:
        np.testing.assert_array_equal(o, plain)
    counts = deploy.report().kernels["axpy"]  # the first launch ran the original, compared
    assert (counts.replaced, counts.verified, counts.fallback) == (2, 1, 0), counts
    assert sum("re-verified" in r.message for r in caplog.records) == 1


def test_an_unverifiable_launch_is_not_deployed_without_the_flag(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    entry = axpy_entry(rec, defines={"BIAS": "0"})
    entry = replace(entry, problem=replace(entry.problem, aliases=(("x", "y"),)))
    k = axpy_kernel()
    for mode, replaced in (("require", 0), ("unverifiable", 1)):
        y = np.ones(4)
        with deploy.use(DeploySpec((entry,)), verify=mode):
            k(y, y, 2.0, 4)  # x and y are one buffer: copies would not be
        counts = deploy.report().kernels["axpy"]
        assert counts.replaced == replaced, (mode, counts)
        if not replaced:
            assert counts.reasons == {"re-verification": 1}


def test_reverify_refuses_overlapping_arguments() -> None:
    from kernforge.backends import get_backend

    be = get_backend("null")
    k = axpy_kernel()
    compiled = be.compile(k.variant)
    y = np.ones(4)
    ran: list[int] = []
    with pytest.raises(Unverifiable, match="share memory"):
        reverify(be, compiled, k.variant.launch, (y, y, 2.0, 4), ("x", "y", "a", "n"), {},
                 lambda: ran.append(1))
    assert ran == []  # refused before the application's launch ran


def test_a_busy_or_insignificant_entry_is_not_deployed(tmp_path: Path) -> None:
    rec = record_axpy(tmp_path / "rec")
    entry = axpy_entry(rec, defines={"BIAS": "0"})
    plain = run_axpy()
    for ev in (replace(entry.evidence, idle=False),
               replace(entry.evidence, speedup_ci=(0.99, 5.34)),
               replace(entry.evidence, verified=False)):
        with deploy.use(DeploySpec((replace(entry, evidence=ev),)), verify="require"):
            np.testing.assert_array_equal(run_axpy(), plain)
        assert deploy.report().kernels["axpy"].reasons == {"evidence": 1}


# ---- end to end: the reproduction through the commands -----------------------------
def kf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kernforge", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


# end to end; the refusal in-process: test_a_wrong_variant_in_a_signed_spec_is_refused...
@pytest.mark.slow
def test_run_deploy_of_a_wrong_signed_variant_keeps_the_applications_result(tmp_path: Path
                                                                          ) -> None:
    """A result (signed, as a producer with a bug would write it) whose variant is
    CENTER_WEIGHT=5.0: export takes it, and the deploying process refuses it on its first
    launch, so the application prints the same result as without the spec."""
    r = kf("record", "-o", "rec", "--", sys.executable, str(APP), *APP_ARGS, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    recs = {p.name: load_recording(p) for p in find_recordings(tmp_path / "rec")}
    write_result(tmp_path / "run" / "heat_step-0", recs["heat_step-0"],
                 {"defines": {"CENTER_WEIGHT": "5.0"}}, speedup=2.0)
    r = kf("export", "run", "-o", "spec.json", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    plain = subprocess.run([sys.executable, str(APP), *APP_ARGS], capture_output=True,
                           text=True, timeout=300, check=True).stdout
    r = kf("run", "--deploy", "spec.json", "--", sys.executable, str(APP), *APP_ARGS,
           cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [ln for ln in r.stdout.splitlines() if "checksum" in ln] == \
        [ln for ln in plain.splitlines() if "checksum" in ln]
    assert "outputs differ from the original kernel's" in r.stderr
    assert "heat_step: 0 replaced" in r.stderr
    # the spec edited by hand: refused before the application runs
    spec = json.loads((tmp_path / "spec.json").read_text())
    spec["entries"][0]["variant"]["defines"]["CENTER_WEIGHT"] = "1.0"
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    r = kf("run", "--deploy", "spec.json", "--", sys.executable, str(APP), *APP_ARGS,
           cwd=tmp_path)
    assert r.returncode == 2 and "checksum mismatch" in r.stderr



def _fingerprinting():  # type: ignore[no-untyped-def]
    """The null backend, with fingerprints computed "where the buffers live" (the CUDA
    backend's way)."""
    from kernforge.backends import get_backend
    from kernforge.backends.fingerprint import host_fingerprint

    class Fingerprinting(type(get_backend("null"))):  # type: ignore[misc]
        def fingerprints(self, buffers):  # type: ignore[no-untyped-def]
            return [host_fingerprint(np.ascontiguousarray(b)) for b in buffers]

    return Fingerprinting()


def _host_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from kernforge.deploy import reverify as module

    seen: list[str] = []
    real = module._differs

    def counted(name, ref, out, tol):  # type: ignore[no-untyped-def]
        seen.append(name)
        return real(name, ref, out, tol)

    monkeypatch.setattr(module, "_differs", counted)
    return seen


def test_reverify_of_an_identical_variant_compares_nothing_on_the_host(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Equal device fingerprints settle it: on the GPU the host copies of large arrays cost
    more than a short application's whole GPU work (the demo's heat_stencil: 0.13 s of a
    0.07 s run on the H100)."""
    hosted = _host_checks(monkeypatch)
    be = _fingerprinting()
    k = axpy_kernel()
    x, y = np.arange(4.0), np.ones(4)
    why, _ = reverify(be, be.compile(k.variant), k.variant.launch, (x, y, 2.0, 4),
                      ("x", "y", "a", "n"), {},
                      lambda: be.launch(be.compile(k.variant), (x, y, 2.0, 4), k.variant.launch))
    assert why is None and hosted == []


def test_reverify_of_a_different_variant_still_names_the_buffer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    hosted = _host_checks(monkeypatch)
    be = _fingerprinting()
    k, wrong = axpy_kernel(), axpy_kernel(bias=100)
    x, y = np.arange(4.0), np.ones(4)
    why, _ = reverify(be, be.compile(wrong.variant), k.variant.launch, (x, y, 2.0, 4),
                      ("x", "y", "a", "n"), {},
                      lambda: be.launch(be.compile(k.variant), (x, y, 2.0, 4), k.variant.launch))
    assert why is not None and why.startswith("y:") and hosted == ["y"]  # x was equal
