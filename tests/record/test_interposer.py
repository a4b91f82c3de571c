"""The driver interposer, run for real against the fake CUDA driver (no GPU needed)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.pipeline.run_app import record_command
from kernforge.record.native_format import SPOOL, finalize_spool, read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture(scope="module")
def recorded(record_fake: Callable[..., Any], tmp_path_factory: pytest.TempPathFactory
             ) -> Path:
    out = tmp_path_factory.mktemp("rec")
    status, _, problems, _ = record_fake(out, max_instances=2)
    assert status == 0 and not problems
    return out


def _plain(fake: FakeCuda, *extra: str) -> str:
    return subprocess.run(fake.command(10, 1000, *extra), env=fake.env, capture_output=True,
                          text=True, check=True).stdout


def test_every_kernel_is_recorded_and_the_program_is_unchanged(
        on_fake: FakeCuda, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    status, units, problems, summaries = record_command(on_fake.command(), tmp_path / "r")
    assert status == 0 and not problems
    assert capfd.readouterr().out == _plain(on_fake)  # same checksum with the interposer
    names = sorted(u.name for u in units)
    assert names == ["blockwidth-0", "gather-0", "heat-0", "heat-1", "heat-2", "heat-3",
                     "offset-0", "scale-0"]
    assert summaries[0]["launches"] == 14 and summaries[0]["recorded"] == 8
    heat = read_native(tmp_path / "r" / "heat-0")
    assert heat.entry == "heat" and heat.grid == (8, 1, 1) and heat.block == (128, 1, 1)
    assert [(p.offset, p.size) for p in heat.params] == [(0, 8), (8, 8), (16, 4), (24, 8)]
    assert heat.written == (1,) and heat.regions[0].size == 8000
    assert heat.identity["device"] == "kernforge fake device"


def test_pointers_in_structs_and_in_device_memory_are_followed(recorded: Path) -> None:
    scale = read_native(recorded / "scale-0")  # a 24-byte struct by value holding a pointer
    assert [(p.offset, p.size, p.pointers) for p in scale.params] == [(0, 24, ((0, 0),))]
    gather = read_native(recorded / "gather-0")  # double **rows: pointers kept in memory
    assert len(gather.regions) == 4 and gather.params[0].pointers == ((0, 0),)
    offset = read_native(recorded / "offset-0")  # an interior pointer into an allocation
    r = offset.regions[offset.params[0].pointers[0][1]]
    assert int.from_bytes(offset.param_bytes[:8], "little") == r.address + 16 * 8


def test_a_second_recording_into_the_same_directory_counts_only_its_own_launches(
        on_fake: FakeCuda, tmp_path: Path) -> None:
    _, _, _, first = record_command(on_fake.command(), tmp_path / "r", kernels="heat",
                                    max_instances=1)
    _, units, _, second = record_command(on_fake.command(), tmp_path / "r", kernels="heat",
                                         max_instances=1)
    assert len(units) == 1 and len(second) == 1  # not the first command's counts again
    assert second[0]["launches"] == first[0]["launches"] == 14


def test_the_runs_counts_go_once_every_spooled_launch_is_a_unit(on_fake: FakeCuda,
                                                               tmp_path: Path) -> None:
    out = tmp_path / "r"
    _, units, problems, summaries = record_command(on_fake.command(), out, kernels="heat",
                                                   max_instances=1)
    assert len(units) == 1 and not problems and summaries[0]["launches"] == 14  # read first
    assert sorted(p.name for p in out.iterdir()) == ["heat-0"]  # no .spool left behind
    # a spool unit that cannot become a unit yet: the interposer's counts stay, to time it
    # when a later finalize_spool can
    stuck = out / SPOOL / "1-000001"
    stuck.mkdir(parents=True)
    (stuck / "unit.json").write_text(json.dumps(
        {"format": "kernforge-spool", "version": 1, "function": "heat", "api": "cuLaunchKernel",
         "grid": [1, 1, 1], "block": [1, 1, 1], "shared_mem": 0, "param_bytes": 0,
         "image": None, "params": [], "regions": []}))
    (stuck / "params.bin").write_bytes(b"")
    _, units, problems, summaries = record_command(on_fake.command(), out, kernels="heat",
                                                   max_instances=1)
    assert len(units) == 1 and len(problems) == 1 and "image was not seen" in problems[0]
    assert stuck.is_dir() and (out / SPOOL / f"summary-{summaries[0]['pid']}.json").is_file()


def test_filters_and_budget(on_fake: FakeCuda, tmp_path: Path) -> None:
    _, units, _, _ = record_command(on_fake.command(), tmp_path / "a", kernels="he*",
                                    max_instances=2, skip=3)
    assert sorted(u.name for u in units) == ["heat-0", "heat-1"]
    assert [read_native(u).capture["call"] for u in sorted(units)] == [3, 4]
    _, units, _, summaries = record_command(on_fake.command(), tmp_path / "b", max_mb=0)
    assert units == [] and summaries[0]["over_budget"] == 14


def test_a_killed_application_leaves_every_completed_unit(on_fake: FakeCuda,
                                                          tmp_path: Path) -> None:
    status, units, problems, _ = record_command(on_fake.command(10, 1000, "kill"),
                                                tmp_path, max_instances=None)
    assert status == 128 + 9 and not problems
    assert sorted(u.name for u in units) == [f"heat-{i}" for i in range(10)]
    (tmp_path / SPOOL / ".tmp-1-000099").mkdir(parents=True)  # a writer killed half-way
    units, problems = finalize_spool(tmp_path)
    assert units == [] and len(problems) == 1 and problems[0].startswith(".tmp-1-000099: "
                                                                          "incomplete")
    assert not (tmp_path / SPOOL / ".tmp-1-000099").exists()


@pytest.mark.slow
def test_recorded_units_replay_verified_at_their_addresses(on_fake: FakeCuda,
                                                           recorded: Path) -> None:
    for unit in sorted(p for p in recorded.iterdir() if (p / "manifest.json").is_file()):
        out = run_isolated(unit, [NativeVariant(), NativeVariant(block=(64, 1, 1))],
                           repeat=3, warmup=1)
        statuses = [m.status.value for m in out["measurements"]]
        expect = ["OK", "WRONG_RESULT"] if unit.name.startswith("blockwidth") else ["OK", "OK"]
        assert statuses == expect, (unit.name, out["measurements"])
        assert out["relocated"] == []


def test_relocation_patches_parameters_and_isolation_contains_a_crash(
        on_fake: FakeCuda, recorded: Path) -> None:
    out = run_isolated(recorded / "heat-0", [NativeVariant()], repeat=2, fixed=False)
    assert out["measurements"][0].status.value == "OK" and out["relocated"] == [0, 1]
    # gather reads pointers stored in device memory: relocated, they point nowhere
    out = run_isolated(recorded / "gather-0", [NativeVariant(), NativeVariant()], fixed=False)
    first, second = out["measurements"]
    assert first.status.value == "RUNTIME_FAILED" and "SIGSEGV" in first.message
    assert second.status.value == "RUNTIME_FAILED"


def test_cli_record_inspect_replay(on_fake: FakeCuda, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "cli"
    assert main(["record", "-o", str(rec), "--kernels", "*heat*", "--max-instances", "1",
                 "--", *on_fake.command()]) == 0
    assert "14 launch(es) of 5 kernel(s) seen" in capsys.readouterr().out
    assert main(["inspect", str(rec)]) == 0
    assert "heat-0" in capsys.readouterr().out
    assert main(["replay", str(rec)]) == 0
    assert "OK" in capsys.readouterr().out


def test_nothing_launched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "-o", str(tmp_path), "--", "/bin/true"]) == 0
    assert "nothing was launched" in capsys.readouterr().out


def test_bad_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        record_command(["no-such-program-here"], tmp_path)


def _spec(fake: FakeCuda, recorded: Path, path: Path, block: int = 64) -> Path:
    from kernforge.deploy import native as nd
    rec = read_native(recorded / "heat-0")
    image = fake.image(tuned=True)
    e = nd.entry(rec, {"block": [block, 1, 1], "carveout": 0}, "tuned.bin", image,
                 {"speedup": 1.5, "ci": [1.4, 1.6]})
    return nd.write_spec(path, [e], {"tuned.bin": image})


def test_deploy_replaces_matching_launches_in_the_unchanged_program(
        on_fake: FakeCuda, recorded: Path, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    spec = _spec(on_fake, recorded, tmp_path / "spec.json")
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command()]) == 0
    out = capfd.readouterr()
    assert out.out == _plain(on_fake)  # the program's own output is unchanged
    assert "10 launch(es) ran a tuned configuration" in out.err
    # another problem size: the key (non-pointer parameter bytes) differs, nothing replaced
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command(10, 500)]) == 0
    err = capfd.readouterr().err
    assert "0 launch(es) ran a tuned configuration; 10 launch(es)" in err


def test_deploy_replaces_launches_of_the_recorded_image_only(
        on_fake: FakeCuda, recorded: Path, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    """A kernel of the same name, geometry and parameter bytes from another image (CuPy builds
    one per dtype under one name) runs unchanged; a spec without the image id (written before
    it existed) replaces by name, geometry and key as it did."""
    from kernforge.core.jsonio import sign, write_json_atomic

    spec = _spec(on_fake, recorded, tmp_path / "spec.json")
    doc = json.loads(spec.read_text())
    for source, replaced in (("00000000000000aa", 0), (None, 10)):
        for e in doc["entries"]:
            e.pop("source_image", None)
            if source:
                e["source_image"] = source
        doc.pop("checksum", None)
        write_json_atomic(spec, sign(doc))
        assert main(["run", "--deploy", str(spec), "--", *on_fake.command()]) == 0
        out = capfd.readouterr()
        assert out.out == _plain(on_fake)
        assert f"{replaced} launch(es) ran a tuned configuration; {10 - replaced} launch" \
            in out.err, out.err


def test_deploy_refuses_an_altered_spec(on_fake: FakeCuda, recorded: Path,
                                        tmp_path: Path) -> None:
    spec = _spec(on_fake, recorded, tmp_path / "spec.json")
    spec.write_text(spec.read_text().replace('"carveout": 0', '"carveout": 100'))
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command()]) == 2


def test_print_env_deploys_into_a_command_started_by_the_shell(
        on_fake: FakeCuda, recorded: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(on_fake, recorded, tmp_path / "spec.json")
    assert main(["run", "--deploy", str(spec), "--print-env"]) == 0
    exports = capsys.readouterr().out
    log = tmp_path / "log.json"
    script = f"{exports}\nexport KERNFORGE_DEPLOY_LOG={log}\n{' '.join(on_fake.command())}\n"
    done = subprocess.run(["bash", "-c", script], env=on_fake.env, capture_output=True,
                          text=True, check=True)
    assert done.stdout == _plain(on_fake)
    assert '"replaced": 10' in log.read_text()


def test_a_tuned_launch_the_driver_refuses_falls_back_to_the_original(
        on_fake: FakeCuda, recorded: Path, tmp_path: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    spec = _spec(on_fake, recorded, tmp_path / "spec.json", block=2048)  # over 1024 threads
    assert main(["run", "--deploy", str(spec), "--", *on_fake.command()]) == 0
    out = capfd.readouterr()
    assert out.out == _plain(on_fake)
    assert "0 launch(es) ran a tuned configuration; 9 launch(es)" in out.err  # then disabled
    assert "the tuned launch failed: the original ran instead" in out.err
