"""A fake CUDA driver over host memory, and an application that uses it, for tests without a GPU.

:func:`build` compiles (with the host C compiler) ``libcuda.so.1`` from ``fakecuda/fake_cuda.c``,
two kernel images from ``fakecuda/fake_kernels.c`` (the plain one, and ``-DKF_TUNED`` that gets
the same results by another route) and ``fake_app`` from ``fakecuda/fake_app.c``, which reaches
the driver as the CUDA runtime does (dlopen, dlsym, cuGetProcAddress); ``libnvrtc.so`` from
``fakecuda/fake_nvrtc.c`` (compiles C "kernels" with the host compiler) and ``fake_nvrtc_app``
(``fakecuda/fake_nvrtc_app.c``), which compiles its kernel at run time as CuPy does,
``fake_threads`` (``fakecuda/fake_threads.c``: many threads launching at once, linked against
libcuda so its driver calls bind by symbol) and ``nvcc``
(``fakecuda/fake_nvcc.sh``: a file bound with ``--source`` compiled the same way), and
``fake_loop`` (``fakecuda/fake_loop.c``: a heat time loop interleaved with a script of copies,
synchronizations, events, frees, other kernels and streams; ``fake_loop_direct`` the same bound
by symbol). The kernel images hold ``heat_x3``/``_x5``/``_x7``/``_x63``: T heat steps in one
launch, a fused operator for a temporal deployment entry, and ``interior_c3``/``_c5``/``_c7``:
T steps of ``interior`` and its companions ``edge`` and ``mix`` (fake_loop's step ``b``), and
``cheat``/``cheat_x5``, a heat step whose coefficient is a module global and 5 of them with it
baked in (``fake_guard``, ``fakecuda/fake_guard.c``: writes to that global, launch attributes),
and ``fake_ctx`` (``fakecuda/fake_ctx.c``: a context that ends and begins again between
launches; ``fake_ctx_direct`` the same bound by symbol). With the returned
:attr:`FakeCuda.env` a process loads the fake instead of a real driver; the interposer, the
ctypes driver of native replay and the deploy path then run for real on the host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path


@dataclass(frozen=True)
class FakeCuda:
    libdir: Path  # holds libcuda.so.1
    kernels: Path  # the image's shared library
    tuned: Path  # the same kernels built with -DKF_TUNED
    app: Path
    nvrtc_app: Path | None = None
    threads_app: Path | None = None
    loop_app: Path | None = None
    loop_direct: Path | None = None
    guard_app: Path | None = None
    ctx_app: Path | None = None
    ctx_direct: Path | None = None

    @property
    def nvrtc(self) -> Path:
        """The fake NVRTC (what KERNFORGE_LIBNVRTC names for kernforge's own compiles)."""
        return self.libdir / "libnvrtc.so"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(self.libdir),
                                                      env.get("LD_LIBRARY_PATH", "")) if p)
        env["KERNFORGE_LIBNVRTC"] = str(self.nvrtc)
        env["KFFAKE_NVRTC_DIR"] = str(self.libdir / "nvrtc-out")
        env["KERNFORGE_NVCC"] = str(self.libdir / "nvcc")
        env.pop("LD_PRELOAD", None)
        return env

    def nvrtc_command(self, steps: int = 3, n: int = 1000, *extra: str) -> list[str]:
        assert self.nvrtc_app is not None
        return [str(self.nvrtc_app), str(steps), str(n), *extra]

    def image(self, tuned: bool = False) -> bytes:
        """A module image the fake driver loads: the text ``KFFAKE <library path>``."""
        return f"KFFAKE {self.tuned if tuned else self.kernels}\n".encode()

    def command(self, steps: int = 10, n: int = 1000, *extra: str) -> list[str]:
        return [str(self.app), str(self.kernels), str(steps), str(n), *extra]

    def threads_command(self, threads: int, launches: int, n: int = 1000,
                        kernels: Path | None = None, kernel: str = "heat",
                        streams: bool = False) -> list[str]:
        """``fake_threads``: ``threads`` threads, started together, each launching ``kernel``
        (heat's parameters) ``launches`` times (``streams``: each on a stream of its own);
        driver calls bound by symbol (-lcuda)."""
        assert self.threads_app is not None
        return [str(self.threads_app), str(kernels or self.kernels), str(threads), str(launches),
                str(n), kernel, *(["streams"] if streams else [])]


    def loop_command(self, script: str, n: int = 1000, direct: bool = False) -> list[str]:
        """``fake_loop``: heat steps and observations as ``script`` says (fake_loop.c);
        ``direct``: the build whose driver calls bind by symbol."""
        app = self.loop_direct if direct else self.loop_app
        assert app is not None
        return [str(app), str(self.kernels), str(n), script]

    def guard_command(self, script: str, n: int = 1000) -> list[str]:
        """``fake_guard``: cheat steps, interior steps through cuLaunchKernelEx and writes to
        the module global cheat_c, as ``script`` says (fake_guard.c)."""
        assert self.guard_app is not None
        return [str(self.guard_app), str(self.kernels), str(n), script]

    def ctx_command(self, script: str, n: int = 1000, direct: bool = False) -> list[str]:
        """``fake_ctx``: heat and cheat steps, and the context's end and a new one, as
        ``script`` says (fake_ctx.c); ``direct``: the build that binds by symbol."""
        app = self.ctx_direct if direct else self.ctx_app
        assert app is not None
        return [str(app), str(self.kernels), str(n), script]


def _cc() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("the fake CUDA driver needs a C compiler (gcc)")
    return cc


def build(out: Path) -> FakeCuda:
    """Compile the fake driver, its kernels and the test application into ``out``."""
    src = resources.files("kernforge.testing") / "fakecuda"
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name in ("fake_cuda.c", "fake_kernels.c", "fake_app.c", "fake_nvrtc.c",
                 "fake_nvrtc_app.c", "fake_threads.c", "fake_loop.c", "fake_guard.c",
                 "fake_ctx.c", "fake_attrs.c"):
        files[name] = out / name
        files[name].write_bytes((src / name).read_bytes())
    cc = _cc()
    steps = [
        [cc, "-std=gnu11", "-O1", "-fPIC", "-shared", "-Wl,-Bsymbolic", "-o",
         str(out / "libcuda.so.1"), str(files["fake_cuda.c"]), "-ldl"],
        [cc, "-O1", "-fPIC", "-shared", "-o", str(out / "kernels.so"), str(files["fake_kernels.c"])],
        [cc, "-O1", "-fPIC", "-shared", "-DKF_TUNED", "-o", str(out / "kernels_tuned.so"),
         str(files["fake_kernels.c"])],
        [cc, "-O1", "-o", str(out / "fake_app"), str(files["fake_app.c"]), "-ldl"],
        [cc, "-std=gnu11", "-O1", "-fPIC", "-shared", "-o", str(out / "libnvrtc.so"),
         str(files["fake_nvrtc.c"])],
        [cc, "-O1", "-o", str(out / "fake_nvrtc_app"), str(files["fake_nvrtc_app.c"]), "-ldl"],
        [cc, "-O1", "-o", str(out / "fake_threads"), str(files["fake_threads.c"]),
         f"-L{out}", "-l:libcuda.so.1", "-lpthread"],
        [cc, "-std=gnu11", "-O1", "-o", str(out / "fake_loop"), str(files["fake_loop.c"]), "-ldl"],
        [cc, "-std=gnu11", "-O1", "-DKF_DIRECT", "-o", str(out / "fake_loop_direct"),
         str(files["fake_loop.c"]), f"-L{out}", "-l:libcuda.so.1", "-ldl"],
        [cc, "-std=gnu11", "-O1", "-o", str(out / "fake_guard"), str(files["fake_guard.c"]),
         "-ldl"],
        [cc, "-std=gnu11", "-O1", "-o", str(out / "fake_ctx"), str(files["fake_ctx.c"]), "-ldl"],
        [cc, "-std=gnu11", "-O1", "-DKF_DIRECT", "-o", str(out / "fake_ctx_direct"),
         str(files["fake_ctx.c"]), f"-L{out}", "-l:libcuda.so.1", "-ldl"],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"building the fake driver failed: {done.stderr[-2000:]}")
    (out / "nvrtc-out").mkdir(exist_ok=True)
    nvcc = out / "nvcc"  # a fake nvcc: compiles C for the fake driver, writes its image
    nvcc.write_bytes((src / "fake_nvcc.sh").read_bytes())
    nvcc.chmod(0o755)
    return FakeCuda(out, out / "kernels.so", out / "kernels_tuned.so", out / "fake_app",
                    out / "fake_nvrtc_app", out / "fake_threads", out / "fake_loop",
                    out / "fake_loop_direct", out / "fake_guard", out / "fake_ctx",
                    out / "fake_ctx_direct")
