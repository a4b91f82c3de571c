"""Running the fake programs with the interposer in deploy mode, from a hand-written line file
(record/native/kf_deploy.c's format), and reading what came back."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernforge.testing.fakedriver import FakeCuda

TIMEOUT_S = 60  # a run that takes longer hangs (the fake programs finish in milliseconds)


def heat_key(n: int = 1000, c: float = 0.25) -> str:
    """The key of a heat launch: two pointers (not compared), n, 4 bytes of padding, c."""
    return "xx" * 16 + n.to_bytes(4, "little").hex() + "xx" * 4 + struct.pack("<d", c).hex()


def line(name: str, image: Path | str, *, grid: str = "8,1,1", block: str = "128,1,1",
         shmem: str = "0", key: str = "*", entry: str | None = None, jit: str = "-",
         new_grid: str = "8,1,1", new_block: str = "64,1,1", new_shmem: str = "0",
         carveout: str = "-1", source: str = "-") -> str:
    return "\t".join([name, grid, block, shmem, key, str(image), entry or name, jit, new_grid,
                      new_block, new_shmem, carveout, source])


def tuned_image(fake: FakeCuda, directory: Path, kernels: Path | None = None) -> Path:
    """A module image file (the fake driver's format) of the tuned kernels."""
    path = directory / "tuned.bin"
    path.write_text(f"KFFAKE {kernels or fake.tuned}\n")
    return path


@dataclass(frozen=True)
class Run:
    rc: int
    out: str
    err: str
    log: dict[str, Any] | None

    @property
    def messages(self) -> list[str]:
        return [m for m in self.err.splitlines() if m.startswith("kernforge: ")]

    @property
    def replaced(self) -> int:
        return sum(e["replaced"] for e in (self.log or {}).get("entries", []))

    def told_once(self, most: int = 1) -> bool:
        """At most ``most`` messages, none of them twice (one per problem, not per launch)."""
        m = self.messages
        return len(m) <= most and len(set(m)) == len(m)


def run(fake: FakeCuda, lib: Path, command: Sequence[str], tmp: Path,
        lines: str | bytes | None = None, *, env: Mapping[str, str] | None = None,
        preload: Sequence[Path | str] | None = None, timeout: float = TIMEOUT_S) -> Run:
    """``command`` under the interposer ``lib`` (or the ``preload`` list) with ``lines`` as
    KERNFORGE_DEPLOY (unless ``env`` names it) and a log in ``tmp``."""
    log = tmp / "deploy-log.json"
    log.unlink(missing_ok=True)
    full = dict(fake.env)
    full["LD_PRELOAD"] = ":".join(str(p) for p in (preload or [lib]))
    full["KERNFORGE_DEPLOY_LOG"] = str(log)
    if lines is not None:
        spec = tmp / "deploy.tsv"
        spec.write_bytes(lines.encode() if isinstance(lines, str) else lines)
        full["KERNFORGE_DEPLOY"] = str(spec)
    full.update(env or {})
    done = subprocess.run(list(command), env=full, capture_output=True, text=True,
                          errors="replace", timeout=timeout, check=False)
    text = log.read_text("utf-8") if log.is_file() else None  # JSON is UTF-8
    return Run(done.returncode, done.stdout, done.stderr, json.loads(text) if text else None)


def plain(fake: FakeCuda, command: Sequence[str]) -> str:
    """The program's output without the interposer."""
    return subprocess.run(list(command), env=fake.env, capture_output=True, text=True,
                          check=True, timeout=TIMEOUT_S).stdout


def compile_c(source: str, out: Path, *flags: str) -> Path:
    """``source`` built with the host C compiler into ``out``."""
    src = out.with_suffix(".c")
    src.write_text(source)
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    subprocess.run([cc, "-O1", "-fPIC", *flags, "-o", str(out), str(src)], check=True,
                   capture_output=True)
    return out


# a preload library that wraps cuLaunchKernel through dlsym(RTLD_NEXT) and counts its calls
OTHER_PRELOAD = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
typedef int (*launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void *, void **, void **);
static long calls;
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned sh, void *s, void **p, void **e) {
  static launch_t next;
  if (!next) next = (launch_t)dlsym(RTLD_NEXT, "cuLaunchKernel");
  if (!next) { fprintf(stderr, "otherlib: no next cuLaunchKernel\n"); abort(); }
  __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
  return next(f, gx, gy, gz, bx, by, bz, sh, s, p, e);
}
__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "otherlib: %ld launches\n", calls);
}
"""


def fused_line(image: Path | str, steps: int = 5, *, entry: str | None = None,
               fuse: str | None = None, key: str | None = None) -> str:
    """A fused entry for heat (kf_deploy.c's field 14): ``heat_x<steps>`` of ``image`` runs
    ``steps`` heat steps at once; IN is the parameter at offset 0, OUT the one at 8."""
    return (line("heat", image, key=heat_key() if key is None else key,
                 entry=entry or f"heat_x{steps}", new_grid="1,1,1", new_block="1,1,1")
            + "\t" + (fuse or f"fuse:{steps}:0:8"))


def fused_groups(r: Run) -> int:
    return int((r.log or {}).get("fused_groups", 0))


V0, V1, W = 0.125, -0.25, 0.375  # the companions' scalars in fake_loop.c's steps ("b")


def companion_fields(n: int = 1000, v0: float = V0) -> list[tuple[str, str, str, str]]:
    """fake_loop.c's companions of interior, as kf_deploy.c's four fields each: edge(out, n,
    side, v) twice (OUT at byte 0), then mix(in, out, n, w) (IN at 0, OUT at 8)."""
    def edge(side: int, v: float) -> str:
        return (bytes(8) + struct.pack("<iid", n, side, v)).hex()
    mix = (bytes(16) + struct.pack("<i4xd", n, W)).hex()
    return [("edge", edge(0, v0), "-", "0"), ("edge", edge(1, V1), "-", "0"),
            ("mix", mix, "0", "8")]


def loop_image_id(fake: FakeCuda, other: bool = False) -> str:
    """The interposer's id of fake_loop.c's module image (the NUL-terminated text it loads),
    or of its other image of the same kernels (step "n"'s first edge)."""
    from kernforge.deploy.native import image_id

    return image_id(f"KFFAKE {fake.kernels}{' 2' if other else ''}".encode() + b"\0")


def with_images(comps: Sequence[Sequence[str]], *images: str) -> list[tuple[str, ...]]:
    """The companions with a fifth field each: its image (``images[i]``, the last repeated)."""
    return [(*c, images[min(i, len(images) - 1)]) for i, c in enumerate(comps)]


GEOMETRY = "1,1,1/1,1,1/0"  # fake_loop.c's companions' grid, block and shared memory


def with_geometry(comps: Sequence[Sequence[str]], *geometries: str) -> list[tuple[str, ...]]:
    """The companions with six fields: image "-" unless given, then the geometry (the last
    one repeated)."""
    five = [c if len(c) == 5 else (*c, "-") for c in comps]
    return [(*c, geometries[min(i, len(geometries) - 1)]) for i, c in enumerate(five)]


def step_line(image: Path | str, steps: int = 5, *, entry: str | None = None,
              fuse: str | None = None,
              companions: Sequence[Sequence[str]] | None = None) -> str:
    """A fused entry for fake_loop.c's step of several launches: ``interior_c<steps>`` of
    ``image`` runs ``steps`` steps (interior and its three companions) at once; companions of
    five or six fields (with their image, and geometry) are written with ``:5`` or ``:6``
    after C."""
    comps = companion_fields() if companions is None else companions
    head = line("interior", image, key=heat_key(), entry=entry or f"interior_c{steps}",
                new_grid="1,1,1", new_block="1,1,1")
    wide = f":{len(comps[0])}" if comps and len(comps[0]) > 4 else ""
    fields = [fuse or f"fuse:{steps}:0:8:{len(comps)}{wide}"] + [f for c in comps for f in c]
    return "\t".join([head, *fields])
