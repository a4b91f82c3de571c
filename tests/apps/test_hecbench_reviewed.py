"""The reviewed HeCBench manifests (benchmarks/hecbench/manifests): each loads as
``kernforge app run`` loads it, runs a program of build/hec by a relative path, and its
patterns compile; where the binaries are here (build/hec, or $HECBENCH_BIN), each names one
that exists, with the input files its command lines read."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from kernforge.apps.manifest import Manifest, load_manifest

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "benchmarks" / "hecbench" / "manifests"
BATCH = ROOT / "benchmarks" / "hecbench_batch.sh"
BIN = Path(os.environ.get("HECBENCH_BIN", ROOT / "build" / "hec"))
NAMES = sorted(p.stem for p in MANIFESTS.glob("*.toml"))
CLASS = re.compile(r"^# HeCBench (\S+)-cuda \((stencil/PDE|other)\): .+\.$")


def _load_in(tree: Path, name: str) -> Manifest:
    """The manifest loaded from a copy of its place in the repository, beside an empty
    build/hec: the source directory must exist to load."""
    d = tree / "benchmarks" / "hecbench" / "manifests"
    d.mkdir(parents=True, exist_ok=True)
    (tree / "build" / "hec").mkdir(parents=True, exist_ok=True)
    shutil.copy(MANIFESTS / f"{name}.toml", d)
    for rel in _sources(name):  # the kernels' sources must exist to load: stand-ins
        f = tree / "build" / "hec" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.touch()
    return load_manifest(d / f"{name}.toml")


def _sources(name: str) -> list[str]:
    """The manifest's [integrate] sources (relative to build/hec)."""
    integ = tomllib.loads((MANIFESTS / f"{name}.toml").read_text()).get("integrate", {})
    return list(integ.get("sources", []))


def _program_and_inputs(m: Manifest) -> set[str]:
    """The program each dataset runs and the paths its arguments name (a '/' in them)."""
    paths: set[str] = set()
    for d in m.datasets:
        argv = shlex.split(d.run)
        paths.add(argv[0])
        paths |= {a for a in argv[1:] if "/" in a and not a.endswith(".out")}
    return paths


def test_at_least_forty_programs_most_of_them_stencils() -> None:
    classes = [CLASS.match(
        (MANIFESTS / f"{n}.toml").read_text().splitlines()[0]) for n in NAMES]
    assert all(classes), [n for n, c in zip(NAMES, classes, strict=True) if not c]
    assert len(NAMES) >= 40
    stencils = [c for c in classes if c and c.group(2) == "stencil/PDE"]
    assert len(stencils) >= 30


@pytest.mark.parametrize("name", NAMES)
def test_a_manifest_loads_and_runs_a_binary_of_build_hec(name: str, tmp_path: Path) -> None:
    m = _load_in(tmp_path, name)
    assert m.name == name and m.build == "true"
    assert m.source == tmp_path / "build" / "hec"
    assert len(m.datasets) >= 1 and len({d.name for d in m.datasets}) == len(m.datasets)
    assert all(shlex.split(d.run)[0] == f"./{name}-cuda" for d in m.datasets)
    assert m.check.kind in ("regex", "exit")
    if m.check.pattern is not None:
        re.compile(m.check.pattern, re.MULTILINE)
    if m.timer.kind == "regex":
        assert m.timer.pattern is not None and re.compile(m.timer.pattern).groups == 1
    assert tuple(m.integrate.strategies) == ("operator", "tune")


def test_a_pass_check_refuses_a_printed_failure(tmp_path: Path) -> None:
    m = _load_in(tmp_path, "heat2d")
    assert m.check.pattern is not None
    rx = re.compile(m.check.pattern, re.MULTILINE)
    assert rx.search("t = 12.5 usec/iter\nPASS\n")
    assert not rx.search("FAIL\nPASS\n") and not rx.search("t = 12.5 usec/iter\n")


@pytest.mark.skipif(not BIN.is_dir(), reason=f"no HeCBench binaries at {BIN} "
                    "(benchmarks/hecbench/README.md builds them; or set HECBENCH_BIN)")
@pytest.mark.parametrize("name", NAMES)
def test_a_manifest_names_an_existing_program(name: str, tmp_path: Path) -> None:
    m = load_manifest(_rooted(name, tmp_path))
    for rel in sorted(_program_and_inputs(m)):
        path = m.source / rel
        assert path.is_file(), f"{name}: {path} is missing"
        if rel.startswith("./"):
            assert os.access(path, os.X_OK), f"{name}: {path} is not executable"


def _rooted(name: str, out: Path) -> Path:
    """The manifest with its source at BIN (as hecbench_batch.sh writes it)."""
    text = (MANIFESTS / f"{name}.toml").read_text()
    path = out / f"{name}.toml"
    text = re.sub(r"(?m)^sources = .*$", "", text)  # the kernels' sources: not needed here
    path.write_text(re.sub(r"(?m)^source = .*$", f'source = "{BIN.resolve()}"', text))
    return path


def _binaries(folder: Path, *names: str) -> None:
    """Stand-ins for the programs' binaries (the script only checks that they are there)."""
    folder.mkdir(exist_ok=True)
    for name in names:
        exe = folder / f"{name}-cuda"
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)


def test_the_batch_script_copies_the_manifests_with_their_source(tmp_path: Path) -> None:
    _binaries(tmp_path / "bin", "jacobi", "heat")
    env = {**os.environ, "HECBENCH_BIN": str(tmp_path / "bin"), "PYTHON": "echo"}
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "out"), "3m", "jacobi", "heat"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["-m", "kernforge", "app", "batch",
                                str(tmp_path / "out" / "manifests" / "jacobi.toml"),
                                str(tmp_path / "out" / "manifests" / "heat.toml"),
                                "--out", str(tmp_path / "out" / "batch"), "--budget", "3m"]
    copied = load_manifest(tmp_path / "out" / "manifests" / "heat.toml")
    assert copied.source == tmp_path / "bin"
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "o2"), "3m", "heat", "bogus"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 2 and "no manifest" in r.stderr
    assert not (tmp_path / "o2").exists()  # nothing written for the names before it
    env["HECBENCH_BIN"] = str(tmp_path / "nowhere")
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "o3")], capture_output=True,
                       text=True, env=env, timeout=60, check=False)
    assert r.returncode == 2 and "no binaries at" in r.stderr


def test_a_program_without_its_binary_is_refused_before_the_batch(tmp_path: Path) -> None:
    # run anyway, it would finish BLOCKED, and the next batch would not run it again
    _binaries(tmp_path / "bin", "heat")
    env = {**os.environ, "HECBENCH_BIN": str(tmp_path / "bin"), "PYTHON": "echo"}
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "out"), "3m", "heat", "jacobi",
                        "laplace"], capture_output=True, text=True, env=env, timeout=60,
                       check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert f"no binary in {tmp_path / 'bin'} for: jacobi-cuda laplace-cuda;" in r.stderr
    assert not (tmp_path / "out").exists()


def test_the_batch_script_points_the_sources_at_hecbench_src(tmp_path: Path) -> None:
    assert _sources("heat") == ["../hecsrc/heat-cuda/heat.cu"]
    _binaries(tmp_path / "bin", "heat")
    (tmp_path / "hs" / "heat-cuda").mkdir(parents=True)
    (tmp_path / "hs" / "heat-cuda" / "heat.cu").write_text("__global__ void solve() {}\n")
    env = {**os.environ, "HECBENCH_BIN": str(tmp_path / "bin"), "PYTHON": "echo",
           "HECBENCH_SRC": str(tmp_path / "hs")}
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "out"), "3m", "heat"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    m = load_manifest(tmp_path / "out" / "manifests" / "heat.toml")
    assert m.integrate.sources == (tmp_path / "hs" / "heat-cuda" / "heat.cu",)
    env["HECBENCH_SRC"] = str(tmp_path / "nowhere")
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "o2"), "3m", "heat"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0 and "without [integrate] sources" in r.stderr
    assert load_manifest(tmp_path / "o2" / "manifests" / "heat.toml").integrate.sources == ()


def test_a_quick_batch_has_fewer_rounds_and_no_tuning(tmp_path: Path) -> None:
    _binaries(tmp_path / "bin", "heat")
    env = {**os.environ, "HECBENCH_BIN": str(tmp_path / "bin"), "PYTHON": "echo",
           "HECBENCH_QUICK": "1"}
    r = subprocess.run(["sh", str(BATCH), str(tmp_path / "out"), "8m", "heat"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    m = load_manifest(tmp_path / "out" / "manifests" / "heat.toml")
    assert (m.measure.rounds, m.measure.e2e_rounds) == (2, 3)
    assert tuple(m.integrate.strategies) == ("operator",)
    assert [d.run for d in m.datasets] == [d.run for d in _load_in(tmp_path / "t", "heat").datasets]


def test_the_smoke_run_says_why_a_program_did_not_run(tmp_path: Path) -> None:
    smoke = [sys.executable, str(ROOT / "benchmarks" / "hecbench_smoke.py"),
             "--bin", str(tmp_path)]
    r = subprocess.run([*smoke, "jacobi"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 1, r.stderr
    assert "exited with status 127: cannot run './jacobi-cuda'" in r.stdout
    # a --json it could not write is said before the runs, not as a traceback after them
    r = subprocess.run([*smoke, "--json", str(tmp_path / "no" / "rows.json"), "jacobi"],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "--json" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_the_batch_script_keeps_an_out_with_spaces_one_argument(tmp_path: Path) -> None:
    _binaries(tmp_path / "bin", "heat", "jacobi")
    argv = tmp_path / "argv.py"  # stands in for python: prints the arguments it was given
    argv.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    argv.chmod(0o755)
    out = tmp_path / "runs dir"
    env = {**os.environ, "HECBENCH_BIN": str(tmp_path / "bin"), "PYTHON": str(argv)}
    r = subprocess.run(["sh", str(BATCH), str(out), "3m", "heat", "jacobi"],
                       capture_output=True, text=True, env=env, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["-m", "kernforge", "app", "batch",
                                    str(out / "manifests" / "heat.toml"),
                                    str(out / "manifests" / "jacobi.toml"),
                                    "--out", str(out / "batch"), "--budget", "3m"]
