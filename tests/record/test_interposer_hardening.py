"""The interposer's record side under hostile input: planted links, bad environment values, a
file-size limit, damaged spool units, concurrent allocation (fake CUDA driver, no GPU)."""

from __future__ import annotations

import json
import os
import resource
import shutil
from pathlib import Path

import pytest
from interposer_helpers import (
    FINDINGS,
    SANITIZE,
    messages,
    record_env,
    run,
    sanitizer_runtime,
    threads_app,
)

from kernforge.cli.main import main
from kernforge.core import ConfigError
from kernforge.record import interposer
from kernforge.record.native_format import SPOOL, finalize_spool, read_native
from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture(scope="module")
def lib() -> Path:
    return interposer.build()


@pytest.fixture(scope="module")
def plain(fake: FakeCuda) -> str:
    return run(fake.command(), fake.env).stdout


def test_a_spool_planted_as_a_link_is_never_written_through(
        fake: FakeCuda, lib: Path, plain: str, tmp_path: Path) -> None:
    out, victim = tmp_path / "shared", tmp_path / "victim"
    out.mkdir(), victim.mkdir()
    (out / SPOOL).symlink_to(victim)
    done = run(fake.command(), record_env(fake, lib, out))
    assert done.returncode == 0 and done.stdout == plain
    assert list(victim.iterdir()) == []
    said = messages(done.stderr)
    assert len(said) == 2, said  # once for the units, once for the counts
    assert "symbolic link" in said[0] and ".spool" in said[0]
    units, problems = finalize_spool(out)
    assert units == [] and len(problems) == 1 and "not a directory" in problems[0]
    assert list(victim.iterdir()) == []  # nor read or cleaned through


def test_links_planted_at_the_names_it_writes_never_have_their_targets_written(
        fake: FakeCuda, lib: Path, plain: str, tmp_path: Path) -> None:
    out, victim_dir, victim = tmp_path / "shared", tmp_path / "vdir", tmp_path / "victim.txt"
    victim_dir.mkdir()
    victim.write_text("precious\n")
    (out / SPOOL / "images").mkdir(parents=True)
    import subprocess  # the program waits for a line, so its pid is known before it writes
    proc = subprocess.Popen(["sh", "-c", 'read x; exec "$0" "$@"', *fake.command()],
                            env=record_env(fake, lib, out), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = proc.pid
    spool = out / SPOOL
    (spool / f"summary-{pid}.json.tmp").symlink_to(victim)  # the names it used to write
    (spool / f"summary-{pid}.json").symlink_to(victim)
    for i in range(1, 9):
        (spool / f".tmp-w{pid}-{i}").symlink_to(victim)
        (spool / "images" / f".tmp-w{pid}-{i}").symlink_to(victim)
    (spool / f".tmp-{pid}-000001").symlink_to(victim_dir)
    (spool / f"{pid}-000002").mkdir()  # a planted final name: not replaced
    stdout, stderr = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0 and stdout == plain, stderr
    assert victim.read_text() == "precious\n" and list(victim_dir.iterdir()) == []
    summary = spool / f"summary-{pid}.json"
    assert not summary.is_symlink() and json.loads(summary.read_text())["recorded"] == 8


@pytest.mark.parametrize(("name", "value"), [
    ("KERNFORGE_MAX_INSTANCES", "four"), ("KERNFORGE_MAX_INSTANCES", "4 "),
    ("KERNFORGE_MAX_MB", str(1 << 44)), ("KERNFORGE_MAX_MB", "-1"),
    ("KERNFORGE_SKIP", "1e3"), ("KERNFORGE_RECORD_ALL", "yes"),
    ("KERNFORGE_SCAN_KB", "99999999999999999999999")])
def test_a_bad_environment_value_is_said_once_and_the_default_used(
        fake: FakeCuda, lib: Path, plain: str, tmp_path: Path, name: str, value: str) -> None:
    done = run(fake.command(), record_env(fake, lib, tmp_path, {name: value}))
    assert done.returncode == 0 and done.stdout == plain
    said = messages(done.stderr)
    assert len(said) == 1 and name in said[0] and "using" in said[0], said
    units, problems = finalize_spool(tmp_path)
    assert len(units) == 8 and not problems  # the defaults: 4 per kernel, no skip


def test_the_launcher_refuses_values_the_interposer_would_not_take(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--max-mb"):
        interposer.environment(tmp_path, max_mb=1 << 44)
    with pytest.raises(ConfigError, match="--max-instances"):
        interposer.environment(tmp_path, max_instances=-2)
    with pytest.raises(ConfigError, match="KERNFORGE_SCAN_KB"):
        interposer.environment(tmp_path, base={"KERNFORGE_SCAN_KB": "lots"})
    with pytest.raises(ConfigError, match="longer than"):
        interposer.environment(tmp_path / ("d" * 4000))
    for bad in ("4 ", "+-4", "0x10", "٣", ""):
        if bad:
            with pytest.raises(ConfigError, match="KERNFORGE_SKIP"):
                interposer.env_int({"KERNFORGE_SKIP": bad}, "KERNFORGE_SKIP", 0, 0, 9)
    assert interposer.env_int({"KERNFORGE_SKIP": "+7"}, "KERNFORGE_SKIP", 0, 0, 9) == 7


def test_a_file_size_limit_fails_units_and_never_kills_the_program(
        fake: FakeCuda, lib: Path, plain: str, tmp_path: Path) -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    done = run(fake.command(), record_env(fake, lib, tmp_path), preexec=limit)
    assert done.returncode == 0 and done.stdout == plain, done.stderr  # not SIGXFSZ
    said = messages(done.stderr)
    assert len(said) == 1 and "File too large" in said[0] and "ulimit -f" in said[0], said
    units, problems = finalize_spool(tmp_path)
    assert not problems and not list((tmp_path / SPOOL).glob(".tmp-*"))  # none half-written
    # only the unit whose files all fit in 4 KiB (blockwidth's 32-byte output)
    assert [u.name for u in units] == ["blockwidth-0"]


def _spool_units(fake: FakeCuda, lib: Path, out: Path) -> list[Path]:
    done = run(fake.command(), record_env(fake, lib, out))
    assert done.returncode == 0
    return sorted(p for p in (out / SPOOL).iterdir() if p.name[:1].isdigit())


def test_each_damaged_spool_unit_is_named_with_its_reason(fake: FakeCuda, lib: Path,
                                                          tmp_path: Path) -> None:
    units = _spool_units(fake, lib, tmp_path)
    assert len(units) == 8
    (units[0] / "params.bin").write_bytes((units[0] / "params.bin").read_bytes()[:-1])
    (units[1] / "unit.json").write_text((units[1] / "unit.json").read_text()[:40])
    u = json.loads((units[2] / "unit.json").read_text())
    u["regions"] = "many"
    (units[2] / "unit.json").write_text(json.dumps(u))
    (units[3] / "r0.pre").unlink()
    os.mkfifo(units[3] / "r0.pre")  # never opened: it would block
    (units[4] / "unit.json").unlink()
    (units[4] / "unit.json").symlink_to(units[5] / "unit.json")
    got, problems = finalize_spool(tmp_path)
    assert len(got) == 3 and len(problems) == 5
    reasons = dict(p.split(": ", 1) for p in problems)
    assert "params.bin holds" in reasons[units[0].name] and "truncated" in \
        reasons[units[0].name]
    assert "not valid JSON" in reasons[units[1].name]
    assert "regions is 'many'" in reasons[units[2].name]
    assert "r0.pre is not a regular file" in reasons[units[3].name]
    assert "symbolic link" in reasons[units[4].name]
    for unit in got:
        read_native(unit, verify=True)


def test_record_exits_non_zero_naming_the_damaged_units(
        on_fake: FakeCuda, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    stuck = rec / SPOOL / "1-000001"
    stuck.mkdir(parents=True)
    (stuck / "unit.json").write_text("{\"format\": \"kernforge-spool\", \"vers")
    code = main(["record", "-o", str(rec), "--kernels", "heat", "--max-instances", "1", "--",
                 *on_fake.command()])
    out = " ".join(capsys.readouterr().out.split())  # as printed, wrapped or not
    assert code == 7  # finished, damaged units skipped (cli.damaged.EXIT_SKIPPED)
    assert "1 spooled launch(es) were damaged or incomplete and skipped" in out
    assert "1-000001: unit.json: not valid JSON" in out
    assert (rec / "heat-0" / "manifest.json").is_file()


def _tmpfs_or(tmp_path: Path) -> Path:
    shm = Path("/dev/shm")  # fsync is free there: thousands of small region files
    if shm.is_dir() and os.access(shm, os.W_OK):
        d = shm / f"kf-test-{os.getpid()}-{tmp_path.name}"
        d.mkdir()
        return d
    return tmp_path / "rec"


@pytest.mark.slow
def test_sanitizers_find_nothing_in_a_threaded_recording(fake: FakeCuda, tmp_path: Path) -> None:
    """32 threads launch while a list of allocations grows under a recorded scan (the region
    table once overflowed there), with the interposer built with ASan and UBSan."""
    asan = sanitizer_runtime()
    if not asan:
        pytest.skip("the C compiler has no AddressSanitizer runtime")
    lib = interposer.build(tmp_path / "cache", extra_flags=SANITIZE)
    assert lib != interposer.build()  # a library of its own
    app = threads_app(tmp_path)
    for threads, nodes, instances in ((32, 300, "2"), (0, 20000, "1000"), (0, 20000, "1000")):
        cmd = [str(app), str(fake.kernels), str(threads), "20", str(nodes)]
        want = run(cmd, fake.env).stdout
        out = _tmpfs_or(tmp_path)
        try:
            env = record_env(fake, lib, out, {"KERNFORGE_MAX_INSTANCES": instances}, asan=asan)
            done = run(cmd, env, timeout=240)
            assert not any(f in done.stderr for f in FINDINGS), done.stderr[-4000:]
            assert done.returncode == 0 and done.stdout == want, done.stderr[-2000:]
            units, problems = finalize_spool(out)
            assert units and not problems
        finally:
            shutil.rmtree(out, ignore_errors=True)
