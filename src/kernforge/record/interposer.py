"""The driver interposer: build it, and run any command under it.

The interposer (``record/native/*.c``) is a small C shared library built on first use with the
host C compiler (no CUDA headers or GPU needed) into a cache directory keyed by the hash of
its sources. Preloaded into a command (``LD_PRELOAD``), it sees every kernel launch the process
makes through the CUDA driver: native programs (static or shared cudart), CuPy, PyTorch,
Triton. What it records is configured through the environment (:func:`environment`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core import BackendUnavailableError, ConfigError
from ..core.paths import cache_folder, cache_path

SOURCES = ("kf.h", "kf_deploy.h", "kf_names.h", "kf_real.c", "kf_state.c", "kf_track.c",
           "kf_hooks.c", "kf_record.c", "kf_io.c", "kf_spool.c", "kf_deploy.c", "kf_spec.c",
           "kf_nvrtc.c", "kf_defer.c", "kf_thunk.c", "kf_sequence.c", "kf_parent.c",
           "kf_guard.c", "kf_unfused.c", "kf_ctx.c", "kf_funcattr.c")
_lock = threading.Lock()
_LIB_NAME = re.compile(r"libkfinterpose-[0-9a-f]{16}\.so")


def _sources() -> dict[str, bytes]:
    from importlib import resources

    pkg = resources.files("kernforge.record") / "native"
    return {name: (pkg / name).read_bytes() for name in SOURCES}


def _stamp(target_dir: Path, flags: Sequence[str]) -> Path | None:
    """Where the name of the library built from the sources as they are now (their sizes and
    modification times, and ``flags``) is kept, so that a start finds it without reading and
    hashing every source; None when the sources are not plain files (a zipped install)."""
    folder = Path(__file__).with_name("native")
    try:
        stats = [os.stat(folder / name) for name in SOURCES]
    except OSError:
        return None
    key = "\0".join([str(folder), *(f"{n}:{st.st_size}:{st.st_mtime_ns}"
                                     for n, st in zip(SOURCES, stats)), "flags", *flags])
    return target_dir / f".stamp-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _identity(lib: Path) -> str:
    """What a stamp keeps of the library it names: its name, size and modification time."""
    st = os.stat(lib)
    return f"{lib.name} {st.st_size} {st.st_mtime_ns}"


def _stamped(stamp: Path | None) -> Path | None:
    """The library a stamp names, when it is still the file that was stamped (another file
    of that name, or a stamp edited to name another library, is not followed)."""
    if stamp is None:
        return None
    try:
        kept = stamp.read_text("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    name = kept.split(" ", 1)[0]
    if not _LIB_NAME.fullmatch(name):
        return None
    lib = stamp.with_name(name)
    try:
        return lib if lib.is_file() and _identity(lib) == kept else None
    except OSError:
        return None


def _write_stamp(stamp: Path | None, lib: Path) -> None:
    if stamp is None:
        return
    part = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
    try:  # a stamp that cannot be written only costs the next start the hashing
        part.write_text(_identity(lib) + "\n", "ascii")
        os.replace(part, stamp)
    except OSError:
        with contextlib.suppress(OSError):  # a read-only cache: there is no part either
            part.unlink(missing_ok=True)


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BackendUnavailableError("no C compiler found to build the driver interposer",
                                      hint="install gcc (or set CC)")
    return cc


def build(out_dir: Path | None = None, *, extra_flags: Sequence[str] = ()) -> Path:
    """The interposer library, built now if its sources changed since the last build.
    ``extra_flags`` go to the compiler (e.g. ``-fsanitize=address,undefined`` for the tests);
    they are part of the cache key, so each set of flags has a library of its own. A start
    whose sources have the sizes and modification times of the last one's finds the library
    through a stamp, without reading and hashing them."""
    flags = [str(f) for f in extra_flags]
    # looked up where it is, writable or not (a prebuilt, read-only cache); a folder that
    # cannot hold a new build is an error only when one is needed
    target_dir = out_dir or cache_path("interposer")
    stamp = _stamp(target_dir, flags)
    found = _stamped(stamp)
    if found is not None:
        return found
    srcs = _sources()
    digest = hashlib.sha256(b"".join(n.encode() + b"\0" + srcs[n] for n in SOURCES)
                            + b"\0flags\0" + "\0".join(flags).encode()).hexdigest()
    lib = target_dir / f"libkfinterpose-{digest[:16]}.so"
    with _lock:
        if lib.is_file():
            _write_stamp(stamp, lib)
            return lib
        import uuid

        if out_dir is None:
            cache_folder("interposer")  # created and writable, or a ConfigError saying why
        target_dir.mkdir(parents=True, exist_ok=True)
        work = target_dir / f".build-{uuid.uuid4().hex}"
        work.mkdir()
        try:
            for name, data in srcs.items():
                (work / name).write_bytes(data)
            part = work / "lib.so"
            # -Bsymbolic-functions: the wrappers' own addresses are the interposer's even where
            # a library preloaded before it exports the same names (kf_hooks.c compares them)
            cmd = [compiler(), "-std=gnu11", "-O2", "-fPIC", "-shared", "-Wall",
                   "-Wno-format-truncation", "-Wl,-Bsymbolic-functions", *flags, "-o", str(part),
                   *[str(work / n) for n in SOURCES if n.endswith(".c")], "-ldl", "-lpthread"]
            done = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if done.returncode != 0:
                raise BackendUnavailableError(
                    f"building the driver interposer failed:\n{done.stderr.strip()[-2000:]}",
                    hint="kernforge builds it with the host C compiler (gcc); check CC"
                    + (f" and the extra flags {' '.join(flags)}" if flags else ""))
            os.replace(part, lib)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _write_stamp(stamp, lib)
    return lib


# the ranges the interposer accepts (kf_record.c); a value outside is refused here, before the
# program starts, rather than said and replaced by the default inside it
MAX_MB_LIMIT = 1 << 40
SCAN_KB_LIMIT = 1 << 30
SEQUENCE_LIMIT = 65536  # launches of a kernel in one sequence unit (KERNFORGE_SEQUENCE)
_LLONG_MAX = (1 << 63) - 1
RECORD_DIR_MAX = 3800  # bytes of KERNFORGE_RECORD_DIR


def _int_in(option: str, value: object, lo: int, hi: int, hint: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{option} {value!r} is not an integer", hint=hint)
    if not lo <= value <= hi:
        raise ConfigError(f"{option} {value} must be from {lo} to {hi}", hint=hint)
    return value


def env_int(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    """An integer KERNFORGE_* value as the interposer reads it (decimal, nothing else), or a
    :class:`ConfigError` naming the variable."""
    raw = env.get(name, "")
    if raw == "":
        return default
    if not re.fullmatch(r"[+-]?[0-9]+", raw):
        raise ConfigError(f"{name}={raw[:64]!r} is not an integer",
                          hint=f"set it to an integer from {lo} to {hi}, or unset it")
    return _int_in(name, int(raw), lo, hi, hint="or unset it for the default")


def environment(out: Path | str, *, kernels: str | None = None, max_instances: int | None = 4,
                skip: int = 0, max_mb: int = 16384, record_all: bool = False,
                base: Mapping[str, str] | None = None, sequence: int | None = None
                ) -> dict[str, str]:
    """The environment that makes a preloaded interposer record into ``out``, added to
    ``base`` (default: this process's environment). Every value is checked against what the
    interposer accepts: a bad one is a :class:`ConfigError` before anything runs."""
    if max_instances is not None:
        _int_in("--max-instances", max_instances, 1, _LLONG_MAX,
                hint="give the number of launches to record per kernel (at least 1: "
                     "0 would record nothing)")
    _int_in("--skip", skip, 0, _LLONG_MAX)
    if sequence is not None:
        _int_in("--sequence", sequence, 2, SEQUENCE_LIMIT,
                hint="give the number of launches of each kernel one sequence unit holds "
                     f"(2 to {SEQUENCE_LIMIT}), or leave it out for one-launch units")
    _int_in("--max-mb", max_mb, 0, MAX_MB_LIMIT,
            hint="give the most MiB of device memory to record in all")
    if kernels is not None and (not kernels or "\0" in kernels):
        raise ConfigError(f"--kernels {kernels!r} is not a pattern",
                          hint="give a glob pattern such as '*solve*', or leave it out")
    out_dir = str(Path(out).resolve())
    if "\0" in out_dir or len(out_dir.encode("utf-8", "surrogateescape")) > RECORD_DIR_MAX:
        raise ConfigError(f"-o {str(out)[:200]!r}: the recording directory's path is longer "
                          f"than {RECORD_DIR_MAX} bytes", hint="record into a shorter path")
    env_int(os.environ if base is None else base, "KERNFORGE_SCAN_KB", 1024, 0, SCAN_KB_LIMIT)
    if sequence is None:  # KERNFORGE_SEQUENCE as the interposer reads it (0 and 1: off)
        sequence = env_int(os.environ if base is None else base, "KERNFORGE_SEQUENCE", 0, 0,
                           SEQUENCE_LIMIT)
    env = {"KERNFORGE_RECORD_DIR": out_dir,
           "KERNFORGE_MAX_INSTANCES": str(-1 if max_instances is None else max_instances),
           "KERNFORGE_SKIP": str(skip), "KERNFORGE_MAX_MB": str(max_mb),
           "KERNFORGE_RECORD_ALL": "1" if record_all else "0",
           "KERNFORGE_SEQUENCE": str(sequence or 0)}
    if kernels:
        env["KERNFORGE_KERNELS"] = kernels
    if "CUPY_CACHE_IN_MEMORY" not in (os.environ if base is None else base):  # CuPy then
        # compiles with NVRTC in the recorded process, so the source is captured
        env["CUPY_CACHE_IN_MEMORY"] = "1"
    return env


def preload_env(lib: Path, extra: Mapping[str, str], base: Mapping[str, str] | None = None
                ) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(extra)
    env["LD_PRELOAD"] = ":".join(p for p in (str(lib), env.get("LD_PRELOAD", "")) if p)
    return env


def run_preloaded(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` with the given environment; its exit status (128+N for signal N)."""
    if not command:
        raise ConfigError("no command given", hint="write it after --, e.g. "
                          "kernforge record -o DIR -- ./app ARGS")
    exe = command[0]
    # looked up on the command's PATH, as it is started (env -i PATH=DIR app: DIR's app)
    path = os.pathsep.join(os.get_exec_path(dict(env)))
    if os.sep not in exe and shutil.which(exe, path=path) is None:
        raise ConfigError(f"command {exe!r} not found", hint="give a path or a command on PATH")
    # the program ends with this process (kf_parent.c): killed alone, it leaves no orphan
    env = {**env, "KERNFORGE_PARENT_PID": str(os.getpid())}
    try:
        proc = subprocess.Popen(list(command), env=env)
    except OSError as exc:
        raise ConfigError(f"cannot run {exe!r}: {exc}", hint="check the path and permissions"
                          ) from None
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        stop_child(proc)
        raise
    return code if code >= 0 else 128 - code


# After Ctrl-C: how long the command may take to end on its own, then after SIGINT, SIGTERM
STOP_GRACE_S = (2.0, 3.0, 3.0)


def stop_child(proc: subprocess.Popen) -> None:
    """End ``proc`` after Ctrl-C. The terminal sent SIGINT to it too (one process group): it
    gets time to end on its own (a Python application under the capture finishes the unit it
    writes or drops it), then SIGINT (for a signal sent to kernforge alone), SIGTERM, and
    SIGKILL; anything recorded stays consistent however it ends (units appear by an atomic
    rename). A second Ctrl-C kills it at once."""
    try:
        for sig, grace in zip((None, signal.SIGINT, signal.SIGTERM), STOP_GRACE_S):
            if sig is not None:
                proc.send_signal(sig)
            try:
                proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def python_child(command: Sequence[str]) -> list[str]:
    """A Python application runs under ``python -m kernforge.pipeline.pyrun`` so that the
    in-process capture (kernforge.Kernel, the CuPy hooks: they add source) works beside the
    interposer; the interposer leaves alone the launches that capture records."""
    return [sys.executable, "-m", "kernforge.pipeline.pyrun", *command]


def suppress(on: bool) -> None:
    """Tell a preloaded interposer (if any) to leave this thread's next launches alone."""
    fn = _suppress_fn()
    if fn is not None:
        fn(1 if on else 0)


@functools.cache
def _suppress_fn() -> Any:
    """The interposer's ``kf_record_suppress`` when this process has it preloaded, else None."""
    if "libkfinterpose" not in os.environ.get("LD_PRELOAD", ""):
        return None
    import ctypes

    try:
        fn = ctypes.CDLL(None).kf_record_suppress
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    return fn
