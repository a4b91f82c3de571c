"""Temporal fusion in the interposer against what a program may do around its held steps, on
the fake CUDA driver: a fork while steps are held (the child's exit must not run the parent's
launches). The loop's buffers are a shared file mapping (host-mapped memory: what a kernel
leaves there is seen by every process mapping it), so a launch run twice shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_run import (
    GEOMETRY,
    companion_fields,
    fused_groups,
    run,
    step_line,
    tuned_image,
    with_geometry,
)

from kernforge.testing.fakedriver import FakeCuda

STEPS = "b" * 13  # T=5: two groups fused, three whole steps held


def both(fake: FakeCuda, lib: Path, tmp: Path, script: str, groups: int = 2,
         companions: list[tuple[str, ...]] | None = None) -> dict[str, tuple[str, bytes]]:
    """``script`` plain and under the fused deployment of the step (at least ``groups`` fused
    launches; ``companions``: the entry's, as deploy_run's): (output, the mapping)."""
    got = {}
    lines = step_line(tuned_image(fake, tmp), 5, companions=companions) + "\n"
    for mode in ("plain", "fused"):
        mapped = tmp / f"{mode}.bin"
        env = {"FAKE_LOOP_MAP": str(mapped)}
        r = run(fake, lib, fake.loop_command(script), tmp, lines if mode == "fused" else None,
                env=env, preload=[lib] if mode == "fused" else [])
        assert r.rc == 0 and not r.messages, (mode, r.err)
        assert mode == "plain" or fused_groups(r) >= groups, r.log
        got[mode] = (r.out, mapped.read_bytes())
    return got


@pytest.mark.parametrize("script", [STEPS + "F" + STEPS + "c", STEPS + "iF" + "j" + STEPS + "c",
                                    STEPS + "F" + "F" + "c"],
                         ids=["between steps", "mid-step", "twice"])
def test_a_fork_with_steps_held_runs_each_launch_once(fake: FakeCuda, lib: Path,
                                                      tmp_path: Path, script: str) -> None:
    got = both(fake, lib, tmp_path, script)
    assert got["fused"] == got["plain"]


@pytest.mark.parametrize("script", [STEPS + "A", STEPS + "iA", STEPS + "ijA"],
                         ids=["between steps", "mid-step", "after a step in parts"])
def test_exit_from_a_signal_handler_runs_what_is_held(fake: FakeCuda, lib: Path,
                                                      tmp_path: Path, script: str) -> None:
    got = both(fake, lib, tmp_path, script)
    assert got["fused"] == got["plain"]


# a preload library (after the interposer) that raises SIGUSR1 right after the AT-th
# pthread_mutex_lock of the process returns (AT=-1: counts them, prints the count at exit); the
# handler calls cuCtxSynchronize (the interposer's flushing export), as a program's signal
# handler that saves its state does
SIGNAL_AT_LOCK = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static int (*real_lock)(pthread_mutex_t *);
static int (*sync_fn)(void);
static long calls, at;
static void handler(int s) {
  (void)s;
  int rc = sync_fn ? sync_fn() : -1;
  char msg[64];
  int n = snprintf(msg, sizeof msg, "signal: cuCtxSynchronize %d\n", rc);
  if (write(2, msg, (size_t)n) < 0) _exit(9);
}
int pthread_mutex_lock(pthread_mutex_t *m) {
  if (!real_lock) real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
  int rc = real_lock(m);
  if (at && __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) == at) raise(SIGUSR1);
  return rc;
}
__attribute__((constructor)) static void init(void) {
  const char *s = getenv("SIGNAL_AT_LOCK");
  at = s ? atol(s) : 0;
  sync_fn = (int (*)(void))dlsym(RTLD_DEFAULT, "cuCtxSynchronize");
  signal(SIGUSR1, handler);
}
__attribute__((destructor)) static void done(void) {
  if (at < 0) fprintf(stderr, "locks: %ld\n", calls);
}
"""


def test_a_signal_handler_calling_the_driver_mid_launch_never_hangs(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """The handler runs right after each pthread_mutex_lock of the run in turn, the
    interposer's lock included (taken, before it says so): it must return (the held steps
    run, or it is told why they could not), and the program go on to its end."""
    import subprocess

    from deploy_run import compile_c

    wrap = compile_c(SIGNAL_AT_LOCK, tmp_path / "sigwrap.so", "-shared", "-ldl")
    lines = step_line(tuned_image(fake, tmp_path), 5) + "\n"
    script = "b" * 8 + "c"
    count = run(fake, lib, fake.loop_command(script), tmp_path, lines, preload=[lib, wrap],
                env={"SIGNAL_AT_LOCK": "-1"})
    assert count.rc == 0 and fused_groups(count) == 1, count.err
    locks = int(count.err.split("locks: ")[1].split()[0])
    assert locks > 8, count.err
    for at in range(1, locks + 1):
        try:
            r = run(fake, lib, fake.loop_command(script), tmp_path, lines, preload=[lib, wrap],
                    env={"SIGNAL_AT_LOCK": str(at)}, timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run hung with the signal after lock {at} of {locks}")
        assert r.rc == 0 and "signal: cuCtxSynchronize 0" in r.err, (at, r.err)
        assert "obs end" in r.out, (at, r.out)


# ---- steps that look like the loop's and are not, and work around held steps ---------------
AROUND = {  # script: the fewest fused groups
    "a mix with IN and OUT swapped": ("b" * 7 + "S" + "b" * 7 + "S" * 7 + "c", 2),
    "companions from another thread, same stream": ("b" * 7 + "T" * 7 + "b" * 7 + "c", 3),
    "an interior with one block fewer": ("b" * 7 + "I" + "b" * 7 + "I" * 7 + "c", 2),
    "steps captured into a graph": ("b" * 7 + "H" + "b" * 7 + "ibH" + "b" * 3 + "c", 2),
    "a free of the diagnostic's buffer": ("b" * 7 + "U" + "b" * 7 + "iU" + "j" + "b" * 7 + "c", 3),
}


@pytest.mark.parametrize(("script", "groups"), list(AROUND.values()), ids=list(AROUND))
def test_what_is_not_the_step_runs_in_order_with_the_held_steps(
        fake: FakeCuda, lib: Path, tmp_path: Path, script: str, groups: int) -> None:
    got = both(fake, lib, tmp_path, script, groups)
    assert got["fused"] == got["plain"]


@pytest.mark.parametrize("script", ["J" * 13 + "c", "b" * 7 + "J" + "b" * 7 + "J" * 7 + "c"],
                         ids=["every step", "some steps"])
def test_a_companion_launched_with_another_geometry_is_not_the_companion(
        fake: FakeCuda, lib: Path, tmp_path: Path, script: str) -> None:
    """Step "J" launches mix with 2 blocks (it mixes two points): the same name, image and
    parameter bytes as the recorded companion, another effect. With the companions' recorded
    geometry in the entry, a chain's first step compares it too (later steps compare the first
    step's), so those steps run as the originals and the steps "b" still fuse."""
    comps = with_geometry(companion_fields(), GEOMETRY)
    got = both(fake, lib, tmp_path, script, 0 if script[0] == "J" else 2, comps)
    assert got["fused"] == got["plain"]


def test_without_its_geometry_a_companion_of_another_geometry_is_taken(
        fake: FakeCuda, lib: Path, tmp_path: Path) -> None:
    """What the geometry prevents: an entry written without it (four or five fields) takes
    steps "J" for the loop's and fuses them; the output differs (here the fused operator
    mixes one point a step, the program two)."""
    lines = step_line(tuned_image(fake, tmp_path), 5) + "\n"
    plain = run(fake, lib, fake.loop_command("J" * 13 + "c"), tmp_path, None, preload=[])
    fused = run(fake, lib, fake.loop_command("J" * 13 + "c"), tmp_path, lines)
    assert fused_groups(fused) == 2 and fused.out != plain.out
