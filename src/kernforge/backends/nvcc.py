"""nvcc through a subprocess: a CUDA source file bound to a recorded native kernel
(``kernforge tune --source FILE.cu``) compiled to a cubin for the device's architecture.

``$KERNFORGE_NVCC`` names another compiler (the tests' fake); else ``nvcc`` on PATH, else
``/usr/local/cuda/bin/nvcc``. An evolved source is written beside nothing: it is compiled from
a temporary directory with ``-I`` of the bound file's directory first, so its quoted includes
resolve as the original's did.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core import BackendUnavailableError, CompileError


def compiler() -> str:
    nvcc = os.environ.get("KERNFORGE_NVCC") or shutil.which("nvcc")
    if not nvcc and Path("/usr/local/cuda/bin/nvcc").is_file():
        nvcc = "/usr/local/cuda/bin/nvcc"
    if not nvcc:
        raise BackendUnavailableError("nvcc not found: --source needs it to compile the file",
                                      hint="put the CUDA toolkit's bin on PATH, or set "
                                           "KERNFORGE_NVCC")
    return nvcc


def cubin(path: Path, *, arch: str, options: Sequence[str] = (), code: str | None = None,
          timeout_s: float = 600.0) -> bytes:
    """``path`` (or ``code`` in its place) compiled with ``nvcc -cubin -arch=<arch>``."""
    with tempfile.TemporaryDirectory(prefix="kf-nvcc-") as tmp:
        src = path
        if code is not None:
            src = Path(tmp) / path.name
            src.write_text(code, "utf-8")
        out = Path(tmp) / "out.cubin"
        cmd = [compiler(), "-cubin", f"-arch={arch}", f"-I{path.parent.resolve()}", *options,
               "-o", str(out), str(src)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc did not finish {path.name} within {timeout_s:.0f} s",
                               log="") from None
        if done.returncode or not out.is_file():
            log = (done.stderr or done.stdout).strip()
            first = "\n".join(log.splitlines()[:8])
            raise CompileError(f"nvcc could not compile {path.name}:\n{first}", log=log)
        return out.read_bytes()
