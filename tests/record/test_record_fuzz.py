"""Seeded fuzzing of the record side: mutated KERNFORGE_* record variables, hostile recording
directories and damaged spool units. Each case: no crash, no hang (time limits), the program's
own output, and one message per thing that went wrong. A quick subset runs by default; the
hundreds of cases are marked slow."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
from interposer_helpers import messages, record_env, run

from kernforge.core import ConfigError
from kernforge.record import interposer
from kernforge.record.native_format import SPOOL, finalize_spool, read_native
from kernforge.testing.fakedriver import FakeCuda

# the record side's integer variables, with the ranges the interposer accepts
RANGES = {"KERNFORGE_MAX_INSTANCES": (-1, (1 << 63) - 1), "KERNFORGE_SKIP": (0, (1 << 63) - 1),
          "KERNFORGE_MAX_MB": (0, 1 << 40), "KERNFORGE_RECORD_ALL": (0, 1),
          "KERNFORGE_SCAN_KB": (0, 1 << 30)}
WORDS = ["", "0", "1", "-1", "+3", "4 ", " 4", "4\t", "1e3", "0x10", "abc", "٣", "-0", "99" * 20,
         str(1 << 44), str(1 << 63), str(-(1 << 63)), "2147483648", "18446744073709551615",
         "1048576", "1099511627776", "1099511627777", "--1", "+", "-", "3.5", "nan", "é" * 50]


def _value(rng: random.Random) -> str:
    w = rng.choice(WORDS)
    if rng.random() < 0.3:
        w = str(rng.randint(-5, 1 << rng.choice((2, 8, 31, 45, 64))))
    return w


def _valid(name: str, value: str) -> bool:
    lo, hi = RANGES[name]
    try:
        interposer.env_int({name: value}, name, 0, lo, hi)
    except ConfigError:
        return False
    return True


@pytest.fixture(scope="module")
def lib() -> Path:
    return interposer.build()


@pytest.fixture(scope="module")
def plain(fake: FakeCuda) -> str:
    return run(fake.command(3, 300), fake.env).stdout


def _env_case(fake: FakeCuda, lib: Path, plain: str, root: Path, rng: random.Random) -> None:
    names = rng.sample(sorted(RANGES), rng.randint(1, 3))
    extra = {n: _value(rng) for n in names}
    done = run(fake.command(3, 300), record_env(fake, lib, root, extra), timeout=30)
    assert done.returncode == 0 and done.stdout == plain, (extra, done.stderr[-1000:])
    said = messages(done.stderr)
    for n in names:  # one message per value it could not take, none for the others
        about = [m for m in said if f" {n}=" in f" {m.split(': ', 1)[-1]}"]
        assert len(about) == (0 if extra[n] == "" or _valid(n, extra[n]) else 1), (extra, said)
    assert len(said) == sum(1 for n in names if extra[n] != "" and not _valid(n, extra[n]))
    units, problems = finalize_spool(root)
    assert not problems, problems
    for u in units[:2]:
        read_native(u)


def _hostile_dir(root: Path, rng: random.Random, elsewhere: Path) -> str:
    """Plant one hostile thing in a shared recording directory; its name."""
    root.mkdir(parents=True, exist_ok=True)
    kind = rng.choice(["spool-link", "spool-fifo", "spool-file", "images-link", "images-file",
                       "images-fifo"])
    target = root / SPOOL if kind.startswith("spool") else root / SPOOL / "images"
    target.parent.mkdir(parents=True, exist_ok=True)
    if kind.endswith("link"):
        target.symlink_to(elsewhere)
    elif kind.endswith("fifo"):
        os.mkfifo(target)
    else:
        target.write_text("not a directory\n")
    return kind


def _hostile_case(fake: FakeCuda, lib: Path, plain: str, root: Path, rng: random.Random,
                  elsewhere: Path) -> None:
    kind = _hostile_dir(root, rng, elsewhere)
    done = run(fake.command(3, 300), record_env(fake, lib, root), timeout=30)
    assert done.returncode == 0 and done.stdout == plain, (kind, done.stderr[-1000:])
    said = messages(done.stderr)
    assert 1 <= len(said) <= 2 and all("could not write" in m for m in said), (kind, said)
    assert list(elsewhere.iterdir()) == []
    units, problems = finalize_spool(root)  # never blocks on the FIFO, never follows the link
    assert units == [] and (problems or kind.startswith("images")), (kind, problems)
    assert list(elsewhere.iterdir()) == []


DAMAGE = ["truncate-params", "truncate-pre", "json-cut", "json-type", "json-missing",
          "fifo-params", "link-unit-json", "dir-params", "remove-pre", "changed-no-post",
          "unit-is-file", "nvrtc-garbage"]


def _damage(unit: Path, how: str, rng: random.Random) -> None:
    u = json.loads((unit / "unit.json").read_text())
    if how == "truncate-params":
        data = (unit / "params.bin").read_bytes()
        (unit / "params.bin").write_bytes(data[:rng.randrange(len(data))])
    elif how == "truncate-pre":
        data = (unit / "r0.pre").read_bytes()
        (unit / "r0.pre").write_bytes(data[:rng.randrange(len(data))])
    elif how == "json-cut":
        text = (unit / "unit.json").read_text()
        (unit / "unit.json").write_text(text[:rng.randrange(1, len(text) - 2)])
    elif how in ("json-type", "json-missing"):
        key = rng.choice(["grid", "block", "params", "regions", "param_bytes", "function",
                          "shared_mem", "format", "image"])
        if how == "json-missing" and key != "image":
            del u[key]
        else:
            wrong = [[], {}, "x", -5, 1.5, [None, None, None], True, ""]  # for this key:
            u[key] = rng.choice([v for v in wrong if not (  # a name, or no parameters,
                (key == "function" and v == "x") or (key in ("params", "regions") and v == []))])
        (unit / "unit.json").write_text(json.dumps(u))
    elif how in ("fifo-params", "dir-params"):
        (unit / "params.bin").unlink()
        if how == "fifo-params":
            os.mkfifo(unit / "params.bin")
        else:
            (unit / "params.bin").mkdir()
    elif how == "link-unit-json":
        shutil.copy(unit / "unit.json", unit.parent / f"copy-{unit.name}.json")
        (unit / "unit.json").unlink()
        (unit / "unit.json").symlink_to(unit.parent / f"copy-{unit.name}.json")
    elif how == "remove-pre":
        (unit / "r0.pre").unlink()
    elif how == "changed-no-post":
        u["regions"][0]["changed"] = 1
        (unit / "r0.post").unlink(missing_ok=True)
        (unit / "unit.json").write_text(json.dumps(u))
    elif how == "unit-is-file":
        shutil.rmtree(unit)
        unit.write_text("a file where a unit was\n")
    elif how == "nvrtc-garbage":
        (unit / "nvrtc.json").write_text("{\"source\": ")


@pytest.fixture(scope="module")
def pristine(fake: FakeCuda, lib: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    done = run(fake.command(3, 300), record_env(fake, lib, root))
    assert done.returncode == 0
    return root


def _spool_case(pristine: Path, root: Path, rng: random.Random) -> None:
    shutil.copytree(pristine, root, symlinks=True)
    units = sorted(p for p in (root / SPOOL).iterdir() if p.name[:1].isdigit())
    hit = rng.sample(units, rng.randint(1, len(units)))
    for unit in hit:
        _damage(unit, rng.choice(DAMAGE), rng)
    got, problems = finalize_spool(root)
    named = sorted(p.split(": ", 1)[0] for p in problems)
    assert named == sorted(u.name for u in hit), problems  # each damaged unit, once
    assert len(got) == len(units) - len(hit)
    for u in got:
        read_native(u, verify=True)


def _cases(fake: FakeCuda, lib: Path, plain: str, pristine: Path, tmp: Path, seed: int,
           n: int) -> None:
    rng = random.Random(seed)
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    for i in range(n):
        root = tmp / f"case-{i}"
        which = i % 3
        if which == 0:
            _env_case(fake, lib, plain, root, rng)
        elif which == 1:
            _hostile_case(fake, lib, plain, root, rng, elsewhere)
        else:
            _spool_case(pristine, root, rng)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_a_quick_seeded_subset(fake: FakeCuda, lib: Path, plain: str, pristine: Path,
                               tmp_path: Path) -> None:
    _cases(fake, lib, plain, pristine, tmp_path, seed=40, n=24)


@pytest.mark.slow
def test_hundreds_of_seeded_cases(fake: FakeCuda, lib: Path, plain: str, pristine: Path,
                                  tmp_path: Path) -> None:
    _cases(fake, lib, plain, pristine, tmp_path, seed=4040, n=360)
