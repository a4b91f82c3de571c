"""The interposer's deploy mode against hostile input, threads and other preload libraries,
run for real on the fake CUDA driver: whatever is wrong, the program runs its original kernels
and is told once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deploy_run import OTHER_PRELOAD, compile_c, heat_key, line, plain, run, tuned_image

from kernforge.testing.fakedriver import FakeCuda


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c(OTHER_PRELOAD, tmp_path_factory.mktemp("other") / "libother.so", "-shared")


# ---- other preload libraries -----------------------------------------------------------------
@pytest.mark.parametrize("first", [True, False], ids=["interposer-first", "interposer-second"])
def test_a_preload_library_wrapping_through_rtld_next_composes_in_either_order(
        fake: FakeCuda, lib: Path, other: Path, tmp_path: Path, first: bool) -> None:
    cmd = fake.threads_command(4, 5)
    order = [lib, other] if first else [other, lib]
    r = run(fake, lib, cmd, tmp_path, line("heat", tuned_image(fake, tmp_path)) + "\n",
            preload=order)
    assert r.rc == 0, r.err
    assert r.out == plain(fake, cmd)
    assert r.replaced == 20 and "otherlib: 20 launches" in r.err  # both saw every launch


@pytest.mark.parametrize("first", [True, False], ids=["interposer-first", "interposer-second"])
def test_recording_composes_with_another_preload_library(
        fake: FakeCuda, lib: Path, other: Path, tmp_path: Path, first: bool) -> None:
    cmd = fake.threads_command(2, 3)
    order = [lib, other] if first else [other, lib]
    r = run(fake, lib, cmd, tmp_path, preload=order,
            env={"KERNFORGE_RECORD_DIR": str(tmp_path / "rec"), "KERNFORGE_MAX_INSTANCES": "1"})
    assert r.rc == 0 and r.out == plain(fake, cmd) and "otherlib: 6 launches" in r.err
    summary = json.loads(next((tmp_path / "rec" / ".spool").glob("summary-*.json")).read_text())
    assert summary["launches"] == 6 and summary["recorded"] >= 1


# ---- threads -----------------------------------------------------------------------------------
def big_deployment(fake: FakeCuda, tmp: Path, entries: int = 10_000) -> str:
    """``entries`` lines, the last one for heat: parsing it takes a while."""
    image = tuned_image(fake, tmp)
    decoys = [line(f"decoy_kernel_{i}", image, key=heat_key()) for i in range(entries - 1)]
    return "\n".join([*decoys, line("heat", image, key=heat_key())]) + "\n"


def check_threads(fake: FakeCuda, lib: Path, tmp: Path, runs: int,
                  preload: list[Path | str] | None = None, env: dict[str, str] | None = None
                  ) -> None:
    cmd = fake.threads_command(32, 5)
    expected, lines = plain(fake, cmd), big_deployment(fake, tmp)
    for i in range(runs):
        r = run(fake, lib, cmd, tmp, lines, preload=preload, env=env)
        assert r.rc == 0 and r.out == expected, (i, r.err)
        assert r.log is not None and r.log["fallbacks"] == 0, (i, r.log)
        assert r.replaced == 32 * 5 and not r.messages, (i, r.err)


def test_no_thread_launches_before_the_whole_deployment_is_read(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    check_threads(fake, lib, tmp_path, runs=3)


@pytest.mark.slow
def test_no_thread_launches_before_the_whole_deployment_is_read_in_many_runs(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    check_threads(fake, lib, tmp_path, runs=60)


# ---- names -------------------------------------------------------------------------------------
PREFIX = "Z" + "templated_arg_" * 50  # 701 bytes shared by two kernels


def long_kernels(tuned: bool) -> str:
    step = "in[i] + c * (in[i - 1] - 2 * in[i] + in[i + 1])"
    first = "in[i] + 1000.0" if tuned else step  # the tuned one differs: a wrong swap shows
    return "\n".join(
        f"""const char *{PREFIX}{suffix}_params = "8,8,4,8";
void {PREFIX}{suffix}(const unsigned *g, const unsigned *b, void **p) {{
  const double *in = *(const double **)p[0]; double *out = *(double **)p[1];
  int n = *(int *)p[2]; double c = *(double *)p[3]; (void)g, (void)b;
  for (int i = 1; i < n - 1; i++) out[i] = {body};
  out[0] = in[0], out[n - 1] = in[n - 1];
}}""" for suffix, body in (("_first", first), ("_second", step + " + 1.0")))


def test_long_names_sharing_a_prefix_are_told_apart(fake: FakeCuda, lib: Path,
                                                    tmp_path: Path) -> None:
    kernels = compile_c(long_kernels(False), tmp_path / "long.so", "-shared")
    tuned = compile_c(long_kernels(True), tmp_path / "long_tuned.so", "-shared")
    lines = line(PREFIX + "_first", tuned_image(fake, tmp_path, tuned)) + "\n"
    second = fake.threads_command(2, 4, kernels=kernels, kernel=PREFIX + "_second")
    r = run(fake, lib, second, tmp_path, lines)
    assert r.rc == 0 and r.out == plain(fake, second)  # not replaced by the other's entry
    assert r.replaced == 0 and r.log is not None and r.log["fallbacks"] == 0
    first = fake.threads_command(2, 4, kernels=kernels, kernel=PREFIX + "_first")
    r = run(fake, lib, first, tmp_path, lines)
    assert r.rc == 0 and r.replaced == 8  # its own entry, by its whole name


def test_a_name_with_quotes_and_control_characters_keeps_the_log_json(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    name = 'odd"name\\with\x01control'
    lines = line(name, tuned_image(fake, tmp_path)) + "\n" + line("heat", tmp_path / "x") + "\n"
    r = run(fake, lib, fake.command(), tmp_path, lines)
    assert r.rc == 0 and r.log is not None  # parsed as JSON
    assert [e["name"] for e in r.log["entries"]] == [name, "heat"]


def test_a_long_comment_stays_a_comment(fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """A comment longer than any buffer whose tail looks like an entry (an 8 KiB fgets once
    made that tail an active entry)."""
    image = tuned_image(fake, tmp_path)
    comment = "#" + "c" * 8190 + line("heat", image)
    r = run(fake, lib, fake.command(), tmp_path,
            f"{comment}\n{line('nothing_here', image)}\n")
    assert r.rc == 0 and r.out == plain(fake, fake.command())
    assert r.log is not None and [e["name"] for e in r.log["entries"]] == ["nothing_here"]
    assert r.replaced == 0 and not r.messages


# ---- fields ------------------------------------------------------------------------------------
BAD_FIELDS = {
    "shmem 2^32": {"shmem": str(2**32)}, "shmem 2^64": {"shmem": str(2**64)},
    "shmem negative": {"shmem": "-0"}, "shmem with a space": {"shmem": " 0"},
    "shmem hex": {"shmem": "0x0"}, "shmem float": {"shmem": "0.0"},
    "grid of four": {"grid": "8,1,1,1"}, "grid of two": {"grid": "8,1"},
    "grid 2^32": {"grid": f"{2**32 + 8},1,1"}, "block zero": {"new_block": "0,1,1"},
    "carveout 101": {"carveout": "101"}, "carveout -2": {"carveout": "-2"},
    "jit id unknown": {"jit": "3=1"}, "jit value huge": {"jit": "0=100000"},
    "jit twice": {"jit": "0=32,0=64"}, "jit pointer": {"jit": "0=140737488355328"},
    "jit empty item": {"jit": "0=32,"}, "key odd": {"key": heat_key()[:-1]},
    "key not hex": {"key": heat_key().replace("e8", "zz")}, "key x0": {"key": "x0" * 32},
    "source short": {"source": "abc"}, "source zero": {"source": "0" * 16},
}


@pytest.mark.parametrize("bad", list(BAD_FIELDS), ids=list(BAD_FIELDS))
def test_a_field_out_of_range_skips_its_line_with_one_message(
        fake: FakeCuda, lib: Path, tmp_path: Path, bad: str) -> None:
    image = tuned_image(fake, tmp_path)
    lines = (line("heat", image, **{"key": heat_key(), **BAD_FIELDS[bad]}) + "\n"
             + line("nothing_here", image) + "\n")
    r = run(fake, lib, fake.command(), tmp_path, lines)
    assert r.rc == 0 and r.out == plain(fake, fake.command())
    assert r.log is not None and [e["name"] for e in r.log["entries"]] == ["nothing_here"]
    assert r.log["malformed_lines"] == 1 and r.told_once()
    assert "1 malformed line(s) skipped (line 1: " in r.messages[0]


def test_the_jit_options_kernforge_writes_are_accepted(fake: FakeCuda, lib: Path,
                                                       tmp_path: Path) -> None:
    lines = line("heat", tuned_image(fake, tmp_path), key=heat_key(),
                 jit="0=64,1=128,7=3,14=2", carveout="50") + "\n"
    r = run(fake, lib, fake.command(), tmp_path, lines)
    assert r.rc == 0 and r.replaced == 10 and not r.messages


# ---- files -------------------------------------------------------------------------------------
def not_regular(kind: str, tmp: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp / "fifo")
        return tmp / "fifo"
    if kind == "directory":
        return tmp
    if kind == "huge":  # sparse: larger than anything kernforge reads
        with open(tmp / "huge", "wb") as f:
            f.truncate(3 << 30)
        return tmp / "huge"
    return Path("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge"])
def test_a_deployment_that_is_not_a_regular_file_is_refused_at_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, kind: str) -> None:
    path = not_regular(kind, tmp_path)
    r = run(fake, lib, fake.command(), tmp_path, env={"KERNFORGE_DEPLOY": str(path)})
    assert r.rc == 0 and r.out == plain(fake, fake.command()) and r.told_once()
    assert r.messages and "nothing is replaced" in r.messages[0]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge", "missing"])
def test_an_image_that_cannot_be_loaded_disables_its_entry_once(
        fake: FakeCuda, lib: Path, tmp_path: Path, kind: str) -> None:
    path = tmp_path / "missing" if kind == "missing" else not_regular(kind, tmp_path)
    r = run(fake, lib, fake.command(), tmp_path, line("heat", path, key=heat_key()) + "\n")
    assert r.rc == 0 and r.out == plain(fake, fake.command()) and r.told_once()
    assert r.log is not None and r.log["entries"][0]["load_failures"] == 1
    assert r.replaced == 0 and r.log["fallbacks"] == 10  # tried once, then the original


# ---- environment -------------------------------------------------------------------------------
@pytest.mark.parametrize("value,shown", [("0", True), ("", True), ("off", True), ("1", False),
                                         ("yes", False)])
def test_kernforge_quiet(fake: FakeCuda, lib: Path, tmp_path: Path, value: str,
                         shown: bool) -> None:
    r = run(fake, lib, fake.command(), tmp_path,
            env={"KERNFORGE_DEPLOY": str(tmp_path / "missing"), "KERNFORGE_QUIET": value})
    assert r.rc == 0 and bool(r.messages) == shown


# a library with a few driver entry points only (cuFuncGetName from the real one): not a driver
PARTIAL_DRIVER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
int cuFuncGetName(const char **name, void *f) {
  int (*real)(const char **, void *) =
      (int (*)(const char **, void *))dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuFuncGetName");
  return real(name, f);
}
int cuCtxGetCurrent(void **c) { *c = 0; return 0; }
"""


def test_a_libcuda_without_driver_functions_is_refused_with_one_message(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    partial = compile_c(PARTIAL_DRIVER, tmp_path / "libpartial.so", "-shared")
    lines = line("heat", tuned_image(fake, tmp_path), key=heat_key()) + "\n"
    r = run(fake, lib, fake.command(), tmp_path, lines, env={"KERNFORGE_LIBCUDA": str(partial)})
    assert r.rc == 0 and r.out == plain(fake, fake.command()) and r.told_once()
    assert "is not a CUDA driver" in r.messages[0] and r.replaced == 10  # libcuda.so.1 used


def test_a_utf8_name_comes_back_unchanged_and_invalid_bytes_as_replacement(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """kf_put_str wrote each non-ASCII byte as \\u00XX: "héat" came back as "hÃ©at". Valid
    UTF-8 passes unchanged; each invalid sequence (a stray continuation byte, a truncated
    sequence, an overlong form, a surrogate, past U+10FFFF) becomes one U+FFFD per maximal
    subpart, as Python decodes with errors="replace"."""
    good = "héat_€_𝄞_ä¸­".encode()
    bad = b"x\xff_\xe2\x82_\xc0\xaf_\xed\xa0\x80_\xf4\x90\x80\x80_\xe2\x82"
    spec = (line("placeholder", tuned_image(fake, tmp_path)) + "\n").encode()
    spec = spec.replace(b"placeholder", good, 2) + \
        (line("placeholder", tmp_path / "x") + "\n").encode().replace(b"placeholder", bad, 2)
    r = run(fake, lib, fake.command(), tmp_path, spec)
    assert r.rc == 0 and r.log is not None
    names = [e["name"] for e in r.log["entries"]]
    assert names == [good.decode(), bad.decode("utf-8", "replace")]
    assert "\ufffd" in names[1] and names[0] == "héat_€_𝄞_ä¸­"
