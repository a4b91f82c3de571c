"""A small program suite laid out as HeCBench lays out its programs (``NAME/Makefile`` with a
``run`` target, ``main.c`` printing its own check and timer): host C programs that gcc builds
and that run without a GPU."""

from __future__ import annotations

import textwrap
from pathlib import Path

MAKEFILE = """\
CC        = gcc
ARCH      = sm_60
LAUNCHER  =
program = main
source = main.c

$(program): $(source) Makefile
\t$(CC) -O1 -o $@ $(source) -lm

clean:
\trm -f $(program)
{run}"""

PASSING = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10;
  int ms = argc > 2 ? atoi(argv[2]) : 0;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += i * 0.5;
  usleep(ms * 1000);
  printf("Average kernel execution time: %f (s)\n", ms * 1e-3);
  int ok = sum >= 0;
  printf("%s\n", ok ? "PASS" : "FAIL");
  return 0;
}
"""

FAILING = PASSING.replace("int ok = sum >= 0;", "int ok = sum < 0;")

CHECKSUM = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += i * 0.25;
  printf("Grid size: %d\n", n);
  printf("Checksum: %.6e\n", sum);
  return 0;
}
"""


def program(root: Path, name: str, source: str, run: str | None, *,
            readme: str | None = None) -> Path:
    """``root/name`` with its Makefile (``run`` the run target's recipe lines, None: no run
    target), ``main.c`` and optionally a README."""
    d = root / name
    d.mkdir(parents=True)
    target = "" if run is None else "\nrun: $(program)\n" + "".join(
        f"\t{line}\n" for line in run.splitlines())
    (d / "Makefile").write_text(MAKEFILE.format(run=target))
    (d / "main.c").write_text(textwrap.dedent(source))
    if readme is not None:
        (d / "README.md").write_text(readme)
    return d


def suite(root: Path) -> Path:
    """Programs that draft (passing, failing, checksum, readme, shell) and programs that are
    refused (noinput, norun, mpi, cmakepart)."""
    program(root, "passing", PASSING, "$(LAUNCHER) ./$(program) 1000 0\n"
                                      "$(LAUNCHER) ./$(program) 2000 0")
    program(root, "failing", FAILING, "$(LAUNCHER) ./$(program) 1000 0")
    program(root, "checksum", CHECKSUM, "./$(program) 300")
    program(root, "readme", PASSING, None, readme="Run it:\n\n    $ ./main 50 0\n")
    program(root, "shell", PASSING, "./$(program) 10 0 > log.txt && cat log.txt")
    program(root, "noinput", PASSING, "./$(program) 10 0 ../data/noinput/grid.dat out.txt")
    program(root, "norun", PASSING, None)
    mpi = program(root, "mpi", PASSING.replace("#include <stdio.h>",
                                               "#include <mpi.h>\n#include <stdio.h>"),
                  "./$(program) 10 0")
    assert mpi.is_dir()
    part = root / "cmakepart"
    part.mkdir()
    (part / "CMakeLists.txt").write_text("add_hecbench_benchmark(NAME x MODEL cuda)\n")
    (part / "main.c").write_text(PASSING)
    (root / "data").mkdir()  # no build file, no source: not a program
    return root
