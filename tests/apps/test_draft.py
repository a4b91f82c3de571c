"""``kernforge app draft``: manifests drafted from a suite's Makefiles, run targets and what
the sources print; the drafted check and timer match what the programs (built by make with
gcc) really print; refusals with their reasons; the real HeCBench tree (``-m slow``)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kernforge.apps.checks import regex_values
from kernforge.apps.draft import draft_suite
from kernforge.apps.draft_build import missing_inputs
from kernforge.apps.draft_output import guess
from kernforge.apps.manifest import load_manifest
from kernforge.cli.main import main

from .suite_helpers import PASSING, program, suite

HECBENCH = Path("/work/hecsrc/src")


@pytest.fixture
def fake_suite(tmp_path: Path) -> Path:
    return suite(tmp_path / "suite")


def _run(manifest: Path, dataset: int = 0) -> str:
    """Build the program as the manifest says and run one dataset; its output."""
    m = load_manifest(manifest)
    subprocess.run(m.build_argv(m.source), cwd=m.source, check=True, capture_output=True)
    r = subprocess.run(m.datasets[dataset].argv(m.source), cwd=m.source, check=True,
                       capture_output=True, text=True)
    return r.stdout + r.stderr


def test_the_suite_drafts_and_refuses_with_reasons(fake_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "manifests"
    got = {d.name: d for d in draft_suite(fake_suite, out, only=[], arch="sm_90")}
    assert set(got) == {"passing", "failing", "checksum", "readme", "shell", "noinput",
                        "norun", "mpi", "cmakepart"}  # data/ is no program
    drafted = {n for n, d in got.items() if d.status == "drafted"}
    assert drafted == {"passing", "failing", "checksum", "readme", "shell"}
    assert "../data/noinput/grid.dat" in got["noinput"].detail
    assert "out.txt" not in got["noinput"].detail  # a file the program writes
    assert got["norun"].detail.startswith("no run target")
    assert got["mpi"].detail.startswith("an MPI program")
    assert "part of a larger build" in got["cmakepart"].detail
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.toml" for n in drafted)


def test_a_drafted_manifest_reads_what_the_program_prints(fake_suite: Path,
                                                          tmp_path: Path) -> None:
    draft_suite(fake_suite, tmp_path / "m", only=["passing"], arch="sm_90")
    path = tmp_path / "m" / "passing.toml"
    text = path.read_text()
    m = load_manifest(path)
    assert m.build == "make ARCH=sm_90" and m.source == fake_suite / "passing"
    assert [d.run for d in m.datasets] == ["./main 1000 0", "./main 2000 0"]
    assert m.check.kind == "regex" and m.timer.kind == "regex" and m.timer.unit == "s"
    # every guess is marked for review, with where it was read
    assert re.search(r"# REVIEW: ARCH set to sm_90", text)
    assert re.search(r"# REVIEW: the program's own check, read from main\.c:\d+", text)
    assert re.search(r"# REVIEW: the program's own timer, read from main\.c:\d+", text)
    output = _run(path)
    assert m.check.pattern is not None and regex_values(m.check, output) == []
    assert m.timer.pattern is not None and re.search(m.timer.pattern, output)
    # the check refuses the program's own failure: the same pattern on a FAIL line
    assert regex_values(m.check, output.replace("PASS", "FAIL")) is None


def test_a_printed_value_is_checked_with_a_tolerance(fake_suite: Path, tmp_path: Path
                                                     ) -> None:
    draft_suite(fake_suite, tmp_path / "m", only=["checksum"], arch="sm_90")
    m = load_manifest(tmp_path / "m" / "checksum.toml")
    assert m.check.kind == "regex" and m.check.rel == pytest.approx(1e-4)
    assert regex_values(m.check, _run(tmp_path / "m" / "checksum.toml")) == [
        pytest.approx(sum(i * 0.25 for i in range(300)))]
    assert m.timer.kind == "wall"  # it prints no timer


def test_readme_lines_and_shell_commands_are_marked(fake_suite: Path, tmp_path: Path
                                                    ) -> None:
    draft_suite(fake_suite, tmp_path / "m", only=["readme", "shell"], arch="sm_90")
    readme = (tmp_path / "m" / "readme.toml").read_text()
    assert "# REVIEW: from README.md: $ ./main 50 0" in readme
    assert load_manifest(tmp_path / "m" / "readme.toml").datasets[0].run == "./main 50 0"
    shell = load_manifest(tmp_path / "m" / "shell.toml")
    assert shell.datasets[0].argv(shell.source)[:2] == ["sh", "-c"]
    assert "# REVIEW: run through sh -c" in (tmp_path / "m" / "shell.toml").read_text()
    assert "PASS" in _run(tmp_path / "m" / "shell.toml")


def test_an_existing_manifest_is_kept_unless_forced(fake_suite: Path, tmp_path: Path) -> None:
    out = tmp_path / "m"
    draft_suite(fake_suite, out, only=["passing"])
    (out / "passing.toml").write_text((out / "passing.toml").read_text() + "# reviewed\n")
    again = draft_suite(fake_suite, out, only=["pass*"])
    assert [d.status for d in again] == ["kept"]
    assert (out / "passing.toml").read_text().endswith("# reviewed\n")
    forced = draft_suite(fake_suite, out, only=["passing"], force=True)
    assert [d.status for d in forced] == ["drafted"]
    assert not (out / "passing.toml").read_text().endswith("# reviewed\n")


def test_a_check_printed_at_several_places_must_say_pass_everywhere(tmp_path: Path) -> None:
    (tmp_path / "main.cu").write_text(r"""
        void verify(bool ok) { printf("Verification %s\n", ok ? "PASSED" : "FAILED"); }
        int main() {
          std::cout << "Average execution time per iteration: " << t / n << " (s)\n";
          std::cout << "Host time: " << std::setprecision(4) << h << " seconds" << std::endl;
          verify(a); verify(b);  // printf("PASS\n") in a comment is not read
        }""")
    check, timer, others = guess(tmp_path)
    assert check.kind == "regex"
    good = "Verification PASSED\nVerification PASSED\n"
    rx = re.compile(check.pattern, re.MULTILINE)
    assert rx.search(good) and not rx.search(good.replace("PASSED\n", "FAILED\n", 1))
    assert timer is not None and timer.unit == "s"
    assert re.search(timer.pattern, "Average execution time per iteration: 1.5e-05 (s)")
    assert [o.unit for o in others] == ["s"]  # the host's time ranks below


def test_missing_inputs_and_outputs() -> None:
    here = Path(__file__).parent
    assert missing_inputs("./main 10 ../nowhere/a.dat out.bin", here) == ["../nowhere/a.dat"]
    assert missing_inputs("./main --input=graph.mtx 3/4 1e-3", here) == ["graph.mtx"]
    assert missing_inputs(f"./main {Path(__file__).name}", here) == []


def test_the_command_prints_a_summary_and_exit_codes(fake_suite: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths: the manifests name the absolute source
    out = Path("m")
    assert main(["app", "draft", "suite", "--out", "m"]) == 0
    assert load_manifest(out / "passing.toml").source == fake_suite / "passing"
    text = capsys.readouterr().out
    assert "| noinput | refused | input file(s) not there: ../data/noinput/grid.dat" in text
    assert "5 drafted, 0 kept, 4 refused, of 9 program(s)" in text
    assert "grep -n REVIEW" in text
    assert main(["app", "draft", str(fake_suite), "--out", str(out), "--only", "no*"]) == 1
    assert main(["app", "draft", str(tmp_path / "nowhere")]) == 2
    assert main(["app", "draft", str(fake_suite), "--only", "bogus*"]) == 2


@pytest.mark.slow
@pytest.mark.skipif(not HECBENCH.is_dir(), reason=f"no HeCBench sources at {HECBENCH}")
def test_the_hecbench_tree_drafts(tmp_path: Path) -> None:
    got = draft_suite(HECBENCH, tmp_path / "m", only=["*-cuda"], arch="sm_90")
    drafted = [d for d in got if d.status == "drafted"]
    refused = [d for d in got if d.status == "refused"]
    assert len(drafted) >= 0.6 * len(got), [(d.name, d.detail) for d in refused]
    assert all(d.detail for d in refused)  # every refusal says why
    for d in drafted:
        m = load_manifest(tmp_path / "m" / f"{d.name}.toml")
        assert m.build.startswith("make") and m.datasets
    names = {d.name: d for d in got}
    if "hotspot-cuda" in names:  # HeCBench keeps its input grids out of the tree
        assert names["hotspot-cuda"].status == "refused"
        assert "input file(s) not there" in names["hotspot-cuda"].detail
    if "heat2d-cuda" in names:
        m = load_manifest(tmp_path / "m" / "heat2d-cuda.toml")
        assert m.timer.kind == "regex" and m.timer.unit == "us"
        assert m.check.pattern is not None
        assert re.search(m.check.pattern, "x\nPASS\n", re.MULTILINE)


def test_a_command_with_another_switch_is_left_for_review(tmp_path: Path) -> None:
    # laplace3d's run target: "./main 128 128 128 100 1" then "./main 512 512 512 100 0",
    # the last argument turning its check (and its PASS line) off
    program(tmp_path / "s", "flag", PASSING, "./$(program) 100 1\n./$(program) 200 0")
    got = draft_suite(tmp_path / "s", tmp_path / "m", only=[])
    assert got[0].detail.startswith("1 dataset(s)")
    path = tmp_path / "m" / "flag.toml"
    text = path.read_text()
    assert "a switch (argument 2: 1 -> 0)" in text
    assert [d.run for d in load_manifest(path).datasets] == ["./main 100 1"]
    # uncommented as the comment says, it is a second dataset
    path.write_text(text.replace("# [[datasets]]", "[[datasets]]")
                    .replace('# name = "run2"', 'name = "run2"')
                    .replace('# run = "./main 200 0"', 'run = "./main 200 0"'))
    assert [d.name for d in load_manifest(path).datasets] == ["run1", "run2"]


def test_a_value_and_a_time_of_a_cout_chain(tmp_path: Path) -> None:
    (tmp_path / "heat.cu").write_text(r"""
        int main() {
          std::cout
            << "Results" << std::endl << std::endl
            << "Error (L2norm): " << norm << std::endl
            << "Solve time (s): " << std::chrono::duration<double>(toc-tic).count() << std::endl
            << "Total time (s): " << total << std::endl
            << "Bandwidth (GB/s): " << bw << std::endl;
        }""")
    check, timer, others = guess(tmp_path)
    out = "Results\n\nError (L2norm): 1.5e-07\nSolve time (s): 2.25\nTotal time (s): 3\n"
    assert check.numeric and re.findall(check.pattern, out) == ["1.5e-07"]
    assert timer is not None and re.findall(timer.pattern, out) == ["2.25"]
    assert [re.findall(o.pattern, out) for o in others] == [["3"]]  # bandwidth is no time


def test_a_standalone_cmake_project_and_its_tests(tmp_path: Path) -> None:
    d = tmp_path / "s" / "cm"
    d.mkdir(parents=True)
    (d / "CMakeLists.txt").write_text("project(cm C)\nadd_executable(cm main.c)\n"
                                      "enable_testing()\nadd_test(NAME small COMMAND cm 64 0)\n")
    (d / "main.c").write_text(PASSING)
    assert [g.status for g in draft_suite(tmp_path / "s", tmp_path / "m", only=[])] == \
        ["drafted"]
    m = load_manifest(tmp_path / "m" / "cm.toml")
    assert m.build.startswith("sh -c 'cmake -S . -B build")
    assert [x.run for x in m.datasets] == ["./build/cm 64 0"]


def test_a_program_directory_given_as_the_suite(fake_suite: Path, tmp_path: Path) -> None:
    got = draft_suite(fake_suite / "passing", tmp_path / "m", only=[])
    assert [(d.name, d.status) for d in got] == [("passing", "drafted")]


def test_a_run_line_that_sets_the_environment_first(tmp_path: Path) -> None:
    # OMP_NUM_THREADS=2 ./main: the program is not an input file, and the manifest's run (no
    # shell) sets the variable through env
    assert missing_inputs("OMP_NUM_THREADS=2 A=b ./main 10 in.dat", tmp_path) == ["in.dat"]
    program(tmp_path / "s", "omp", PASSING, "OMP_NUM_THREADS=2 ./$(program) 100")
    got = draft_suite(tmp_path / "s", tmp_path / "m", only=[])
    assert [g.status for g in got] == ["drafted"], got[0].detail
    m = load_manifest(tmp_path / "m" / "omp.toml")
    assert [d.run for d in m.datasets] == ["env OMP_NUM_THREADS=2 ./main 100"]
    assert "PASS" in _run(tmp_path / "m" / "omp.toml")
