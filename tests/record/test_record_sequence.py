"""Sequence units (``kernforge record --sequence N``), recorded for real by the interposer on
the fake CUDA driver from fake_loop (a heat time loop whose buffers swap between steps,
interleaved with a script of copies, syncs, other kernels and streams) and replayed through
the driver API against it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernforge.backends.image_build import bind_source
from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.core.native import NativeBuild, NativeRecording
from kernforge.pipeline.run_app import record_command
from kernforge.record import interposer
from kernforge.record.native_format import SPOOL, finalize_spool, read_native
from kernforge.replay.native import NativeVariant
from kernforge.replay.native_child import run_isolated
from kernforge.testing.fakedriver import FakeCuda

N = 1000  # grid points of fake_loop's buffers
FIXTURE = Path(__file__).parents[1] / "data" / "native_v2" / "heat-0"


def _record(fake: FakeCuda, script: str, out: Path, sequence: int | None = 5,
            direct: bool = False, **kw: object) -> list[NativeRecording]:
    status, units, problems, _ = record_command(fake.loop_command(script, N, direct), out,
                                                sequence=sequence, **kw)  # type: ignore[arg-type]
    assert not problems, problems
    assert status == 0 or "9" in script, status
    return [read_native(u, verify=True) for u in sorted(units)]


def _fill(seed: int) -> np.ndarray:  # fake_loop.c's fill()
    i = np.arange(N)
    return ((i + 7 * seed) * 37 % 101) / 101.0


def _heat(x: np.ndarray) -> np.ndarray:  # fake_kernels.c's heat, the same arithmetic
    y = x.copy()
    y[1:-1] = x[1:-1] + 0.25 * (x[:-2] - 2 * x[1:-1] + x[2:])
    return y


def _region(rec: NativeRecording, param: int, launch: int = 0) -> int:
    """The region the pointer parameter ``param`` of the sequence's launch ``launch`` is in."""
    return rec.steps[launch].params[param].pointers[0][1]


def test_a_ping_pong_loop_is_one_unit_with_both_time_levels(
        on_fake: FakeCuda, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    (rec,) = _record(on_fake, "s" * 5 + "c", tmp_path / "r", max_instances=1)
    plain = subprocess.run(on_fake.loop_command("s" * 5 + "c", N), env=on_fake.env,
                           capture_output=True, text=True, check=True).stdout
    assert capfd.readouterr().out == plain  # the program's own output, unchanged
    assert rec.is_sequence and rec.sequence == {"requested": 5, "steps": 5, "ended": "complete"}
    assert [s.entry for s in rec.steps] == ["heat"] * 5 and rec.written == (0, 1)
    a, b = _region(rec, 0), _region(rec, 1)  # the first launch reads a0, writes b0
    assert [(_region(rec, 0, j), _region(rec, 1, j)) for j in range(5)] == [(a, b), (b, a)] * 2 \
        + [(a, b)]
    x, y = _fill(0), _fill(1)
    assert np.array_equal(rec.prologue(a).view(np.float64), x)
    assert np.array_equal(rec.prologue(b).view(np.float64), y)
    levels = [x]
    for _ in range(5):
        levels.append(_heat(levels[-1]))
    assert np.array_equal(rec.expected(b).view(np.float64), levels[5])  # the last level
    assert np.array_equal(rec.expected(a).view(np.float64), levels[4])  # and the one before
    assert "5 launches" in rec.capture["app_time_of"]
    out = run_isolated(rec.path, [NativeVariant(), NativeVariant(block=(64, 1, 1))], repeat=3,
                       warmup=1)
    assert [m.status.value for m in out["measurements"]] == ["OK", "OK"], out["measurements"]
    assert len(out["measurements"][0].checks) == 2 and out["relocated"] == []


def test_another_kernel_between_steps_is_in_the_sequence(on_fake: FakeCuda,
                                                        tmp_path: Path) -> None:
    (rec,) = _record(on_fake, "sskssc", tmp_path / "r", sequence=4, max_instances=1)
    assert [s.entry for s in rec.steps] == ["heat", "heat", "offset", "heat", "heat"]
    assert rec.sequence["steps"] == 4 and rec.sequence["ended"] == "complete"
    out = run_isolated(rec.path, [NativeVariant(), NativeVariant(block=(32, 1, 1))], repeat=2,
                       warmup=1)
    assert [m.status.value for m in out["measurements"]] == ["OK", "OK"]
    # the offset launch changed a0 between the steps: without it the levels differ
    want = _heat(_heat(_fill(0)))
    want[:8] += 1.0 / 1024 + np.array([0.5, 0.25, 0.125, 0.0625] * 2)
    want = _heat(_heat(want))
    assert np.array_equal(rec.expected(_region(rec, 1, 4)).view(np.float64), want)


CUTS = {"a copy": "c", "a context sync": "y", "an alloc and free": "f", "a memset": "m",
        "an event record and sync": "e", "a launch on another stream": "t",
        "an unknown driver function": "z"}


@pytest.mark.parametrize("direct", [False, True], ids=["cuGetProcAddress", "linked"])
@pytest.mark.parametrize("op", list(CUTS.values()), ids=list(CUTS))
def test_an_observation_cuts_the_sequence_short(on_fake: FakeCuda, tmp_path: Path, op: str,
                                                direct: bool) -> None:
    recs = _record(on_fake, "sss" + op + "ssss", tmp_path / "r", direct=direct, max_instances=1)
    heat = [r for r in recs if r.entry == "heat"]
    assert len(heat) == 1
    (rec,) = heat
    assert rec.sequence["steps"] == 3 and len(rec.steps) == 3
    assert rec.sequence["ended"] == ("a launch on another stream or context" if op == "t"
                                     else "a driver call that could observe memory")
    x = _fill(0)
    for _ in range(3):
        x = _heat(x)
    assert np.array_equal(rec.expected(_region(rec, 1, 2)).view(np.float64), x)
    out = run_isolated(rec.path, [NativeVariant()], repeat=2, warmup=1)
    assert out["measurements"][0].status.value == "OK"


def test_exit_ends_an_open_sequence(on_fake: FakeCuda, tmp_path: Path) -> None:
    (rec,) = _record(on_fake, "sssx", tmp_path / "r", max_instances=1)
    assert rec.sequence["steps"] == 3 and rec.sequence["ended"] == "the process exited"


@pytest.mark.slow
def test_a_wrong_variant_is_caught_on_the_intermediate_level(on_fake_nvrtc: FakeCuda,
                                                             tmp_path: Path) -> None:
    """heat that leaves OUT right but scribbles into IN after computing: each scribble is
    overwritten by the next step but the last, which only the intermediate level shows."""
    (rec,) = _record(on_fake_nvrtc, "ssss", tmp_path / "r", sequence=4, max_instances=1)
    good = on_fake_nvrtc.libdir / "fake_kernels.c"
    text = good.read_text()
    marker = "in[i] + c * (in[i - 1] - 2 * in[i] + in[i + 1]);\n#endif"
    assert text.count(marker) == 1
    wrong = tmp_path / "wrong.c"
    wrong.write_text(text.replace(marker, marker[:-len("#endif")]
                                  + "  ((double *)in)[n / 2] += 1.0;\n#endif"))
    ok, bad = (NativeVariant(build=NativeBuild(source=bind_source(f))) for f in (good, wrong))
    out = run_isolated(rec.path, [ok, bad], repeat=2, warmup=1)
    first, second = out["measurements"]
    assert first.status.value == "OK" and second.status.value == "WRONG_RESULT"
    last_in, last_out = _region(rec, 0, 3), _region(rec, 1, 3)
    failed = {c.name for c in second.checks if not c.passed}
    assert failed == {f"region{last_in}@{rec.regions[last_in].address:#x}"}, second.message
    assert any(c.passed and c.name.startswith(f"region{last_out}@") for c in second.checks)


def test_kill_9_during_a_sequence_leaves_only_complete_units(on_fake: FakeCuda,
                                                            tmp_path: Path) -> None:
    recs = _record(on_fake, "sss" + "ss9", tmp_path / "r", sequence=3, max_instances=None)
    assert [(r.entry, r.sequence["steps"]) for r in recs] == [("heat", 3)]
    (tmp_path / "r" / SPOOL / ".tmp-1-000099").mkdir(parents=True)  # a writer killed half-way
    units, problems = finalize_spool(tmp_path / "r")
    assert units == [] and len(problems) == 1 and "incomplete" in problems[0]


def test_old_units_still_read() -> None:
    rec = read_native(FIXTURE, verify=True)  # written by the schema-2 code (one launch)
    assert not rec.is_sequence and rec.steps == () and rec.sequence == {}
    assert rec.entry == "heat" and rec.written == (1,) and len(rec.regions) == 2


def test_without_sequence_units_are_one_launch_schema_2(on_fake: FakeCuda,
                                                      tmp_path: Path) -> None:
    recs = _record(on_fake, "ssc", tmp_path / "r", sequence=None, max_instances=1)
    assert [r.is_sequence for r in recs] == [False]
    assert '"schema_version": 2' in (recs[0].path / "manifest.json").read_text()


def test_cli_sequence_option_and_variable(on_fake: FakeCuda, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    assert main(["record", "-o", str(out), "--sequence", "3", "--max-instances", "1", "--",
                 *on_fake.loop_command("ssss", N)]) == 0
    assert read_native(out / "heat-0").sequence["steps"] == 3
    assert main(["replay", str(out)]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["record", "-o", str(tmp_path / "x"), "--sequence", "1", "--",
                 *on_fake.loop_command("s", N)]) == 2
    monkeypatch.setenv("KERNFORGE_SEQUENCE", "3x")
    with pytest.raises(ConfigError, match="KERNFORGE_SEQUENCE"):
        record_command(on_fake.loop_command("s", N), tmp_path / "y")
    monkeypatch.setenv("KERNFORGE_SEQUENCE", "2")
    _, units, _, _ = record_command(on_fake.loop_command("sss", N), tmp_path / "z",
                                    max_instances=1)
    assert read_native(units[0]).sequence["steps"] == 2


def test_a_damaged_sequence_spool_unit_is_named(on_fake: FakeCuda, tmp_path: Path) -> None:
    env = {**on_fake.env, "LD_PRELOAD": str(interposer.build()),
           "KERNFORGE_RECORD_DIR": str(tmp_path / "r"), "KERNFORGE_SEQUENCE": "3",
           "KERNFORGE_MAX_INSTANCES": "1"}
    subprocess.run(on_fake.loop_command("sss", N), env=env, check=True, capture_output=True)
    (unit,) = [p for p in (tmp_path / "r" / SPOOL).iterdir() if p.name[:1].isdigit()]
    (unit / "p2.bin").write_bytes(b"short")
    units, problems = finalize_spool(tmp_path / "r")
    assert units == [] and len(problems) == 1 and "p2.bin holds 5 bytes" in problems[0]
    shutil.rmtree(unit)



@pytest.mark.slow
def test_integrity_validate_takes_sequence_units(on_fake_nvrtc: FakeCuda, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    status, units, problems, _ = record_command(on_fake_nvrtc.nvrtc_command(4), tmp_path / "r",
                                                sequence=3, max_instances=1)
    assert status == 0 and not problems
    (unit,) = units
    rec = read_native(unit)
    assert rec.source is not None and rec.sequence["steps"] == 3
    assert main(["integrity", "validate", str(unit)]) == 0
    assert "a sequence of 3 launches" in capsys.readouterr().out
    code = rec.source.code
    faster, wrong = tmp_path / "faster.c", tmp_path / "wrong.c"
    faster.write_text(code.replace("#define KF_REPS 64", "#define KF_REPS 1"))
    wrong.write_text(code.replace("y[i] = v;", "y[i] = v + (i == 7);"))
    status = main(["integrity", "validate", str(unit), "--source", str(faster), "--passes", "3"])
    out = capsys.readouterr().out  # judged as every unit's candidate: the shared machine's
    assert (status, out.split()[0]) in ((0, "accepted"), (9, "inconclusive")), out  # noise too
    assert "speed: faster" in out or "busy" in out
    assert main(["integrity", "validate", str(unit), "--source", str(wrong)]) == 5
    assert "WRONG_RESULT" in capsys.readouterr().out
    assert main(["integrity", "validate", str(unit), "--opt", "x=1"]) == 2


def test_tune_applies_each_configuration_to_every_launch_of_the_kernel(
        on_fake: FakeCuda, tmp_path: Path) -> None:
    (rec,) = _record(on_fake, "sskss", tmp_path / "r", sequence=4, max_instances=1)
    assert len(rec.steps) == 5
    assert main(["tune", str(tmp_path / "r"), "--out", str(tmp_path / "t"), "--repeat",
                 "2"]) == 0
    (unit,) = [json.loads(p.read_text())["native"]
               for p in (tmp_path / "t").glob("*/result.json")]
    labels = {e["label"]: e["status"] for e in unit["evaluations"]}
    assert labels["recorded"] == "OK" and any(k.startswith("block=") for k in labels)
    assert set(labels.values()) == {"OK"}, labels


@pytest.mark.parametrize("value", ["abc", "70000", "-1", " 3"])
def test_the_interposer_reads_kernforge_sequence_strictly(on_fake: FakeCuda, tmp_path: Path,
                                                         value: str) -> None:
    env = {**on_fake.env, "LD_PRELOAD": str(interposer.build()),
           "KERNFORGE_RECORD_DIR": str(tmp_path / "r"), "KERNFORGE_SEQUENCE": value,
           "KERNFORGE_MAX_INSTANCES": "1"}
    done = subprocess.run(on_fake.loop_command("sss", N), env=env, check=True,
                          capture_output=True, text=True)
    assert f"KERNFORGE_SEQUENCE={value} is not an integer from 0 to 65536; using 0" in done.stderr
    units, problems = finalize_spool(tmp_path / "r")
    assert not problems and [read_native(u).is_sequence for u in units] == [False]


def test_a_sequence_over_the_budget_is_not_recorded(on_fake: FakeCuda, tmp_path: Path) -> None:
    status, units, problems, summaries = record_command(
        on_fake.loop_command("sss", N), tmp_path / "r", sequence=3, max_mb=0)
    assert status == 0 and not problems and units == []
    assert summaries[0]["over_budget"] == 3 and summaries[0]["recorded"] == 0


PY_LOOP = """
import struct, sys
import numpy as np
from kernforge.backends.driver import Driver
d = Driver()
fn = d.function(d.load(open(sys.argv[1], "rb").read()), "heat")
n = 1000
a, b = d.alloc(8 * n), d.alloc(8 * n)
d.htod(a, np.arange(n, dtype=np.float64) % 7)
d.htod(b, np.zeros(n))
for _ in range(int(sys.argv[2])):
    d.launch(fn, (8, 1, 1), (128, 1, 1), 0, struct.pack("<QQi4xd", a, b, n, 0.25))
    a, b = b, a
print(float(np.frombuffer(d.dtoh(a, 8 * n), dtype=np.float64).sum()))
"""


def test_a_python_application_records_sequences_through_the_interposer(
        on_fake: FakeCuda, tmp_path: Path) -> None:
    (tmp_path / "image").write_bytes(on_fake.image())
    (tmp_path / "loop.py").write_text(PY_LOOP)
    status, units, problems, _ = record_command(
        [sys.executable, str(tmp_path / "loop.py"), str(tmp_path / "image"), "6"],
        tmp_path / "r", sequence=4, max_instances=1)
    assert status == 0 and not problems
    (rec,) = [read_native(u) for u in units]
    assert rec.sequence == {"requested": 4, "steps": 4, "ended": "complete"}
    # the parameters came in cuLaunchKernel's `extra` buffer: recorded as given
    assert int.from_bytes(rec.param_bytes[16:20], "little") == 1000 and len(rec.regions) == 2
    x = np.arange(1000, dtype=np.float64) % 7
    for _ in range(4):
        x = _heat(x)
    assert np.array_equal(rec.expected(_region(rec, 1, 3)).view(np.float64), x)
    out = run_isolated(rec.path, [NativeVariant()], repeat=2, warmup=1)
    assert out["measurements"][0].status.value == "OK"
