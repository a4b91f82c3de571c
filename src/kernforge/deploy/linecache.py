"""Native deployments verified before: a start of the same spec does no hashing.

``kernforge run --deploy NATIVE_SPEC`` checks the spec's signature and the sha256 of every
image, then writes the interposer's line file (:mod:`.interposed`). That is most of the
launcher's start-up, paid again by every start of a program that runs for milliseconds. Once a
spec has passed, its line file is kept in the cache folder (``$KERNFORGE_CACHE_DIR/deploy``)
with a record of what was verified: the spec's bytes, and for the spec, every image (as the
spec names it and as the line file names it, resolved), the interposer library and the
interposer's sources their identity: device, inode, size, modification and change times
(``st_ctime`` cannot be set back by a user: any write, rename or ``utime`` moves it), and the
sources' folder listing. :func:`lookup` trusts the kept line file only when all of it is
still so and the spec's bytes are the recorded ones; anything else is a miss, and the launcher
verifies the spec in full again (a damaged or edited spec is then refused as before).

A file changed within :data:`RACY_NS` before a verification is not recorded (its next change
could fall within the same tick of the file system's clock and leave its times as they are):
the next start verifies it again. This module imports only ``os``, ``stat`` and ``time`` (all
loaded with the interpreter): the launcher reads it before the program starts (docs/deploy.md,
"Start-up cost").
"""

from __future__ import annotations

import os
import stat
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Iterable

MAGIC = "kernforge verified native deployment 1"
SEPARATOR = b"\n--\n"  # the record's head, then the spec's bytes as verified
RACY_NS = 2_000_000_000  # files changed this recently are verified again at the next start
KEEP_OLD_S = 86400.0  # a replaced line file is removed this long after (a program may read it)
UNUSED_S = 30 * 86400.0  # a record no start has used for this long is removed


def cache_dir() -> str:
    """``deploy`` under kernforge's cache root (kernforge.core.paths, without ``pathlib``)."""
    root = os.environ.get("KERNFORGE_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg if xdg else os.path.join(os.path.expanduser("~"), ".cache"),
                            "kernforge")
    return os.path.join(root, "deploy")


def fnv64(data: bytes) -> str:
    """FNV-1a 64 of ``data`` as 16 hex digits: a name, not a check (a record names its spec)."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def record_path(spec_abs: str) -> str:
    return os.path.join(cache_dir(), fnv64(os.fsencode(spec_abs)) + ".verified")


def identity(path: str) -> str:
    """What a record keeps of a file: device, inode, size, mtime, ctime, mode (after links)."""
    st = os.stat(path)
    return (f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:"
            f"{st.st_mode:o}")


def listing(folder: str) -> str:
    return "/".join(sorted(os.listdir(folder)))


def lookup(spec: str) -> tuple[str, str] | None:
    """(the interposer library, the line file) of the spec at ``spec`` when it was verified
    before and nothing recorded has changed since; else None."""
    spec_abs = os.path.abspath(spec)
    try:
        # a regular file only, and no open that blocks (a FIFO in its place)
        fd = os.open(record_path(spec_abs), os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            head, sep, kept = f.read().partition(SEPARATOR)
        if not sep:
            return None
        rows = head.decode("utf-8", "surrogateescape").split("\n")
        if rows[0] != MAGIC:
            return None
        named: dict[str, str] = {}
        for row in rows[1:]:
            kind, path, kept_id = row.split("\t")
            now = listing(path) if kind == "dir" else identity(path)
            if now != kept_id:
                return None
            named.setdefault(kind, path)
        if named.get("spec") != spec_abs or "lib" not in named or "lines" not in named:
            return None
        with open(spec_abs, "rb") as f:
            if f.read() != kept:
                return None
    except (OSError, ValueError):  # gone, unreadable, not a record: verify again
        return None
    try:
        os.utime(record_path(spec_abs))  # in use: not pruned
    except OSError:  # a read-only cache
        pass
    return named["lib"], named["lines"]


def remember(spec_abs: str, lines_text: str, lib: str, files: Iterable[str],
             sources: Iterable[str], source_dir: str, started_ns: int) -> str | None:
    """Keep the line file of the spec at ``spec_abs``, verified from ``started_ns`` on, and
    the record that lets :func:`lookup` find it: ``files`` are the spec's images, ``sources``
    the interposer's source files (in ``source_dir``) that ``lib`` was built from. Returns the
    kept line file, or None when nothing is kept: a file changed after ``started_ns -
    RACY_NS`` (its times do not tell whether it changed again while it was verified), a file
    gone, a name a record cannot hold. Raises OSError when the cache folder cannot be used."""
    limit = started_ns - RACY_NS
    kept = {}
    try:
        for path in dict.fromkeys([spec_abs, *files, *sources]):
            st = os.stat(path)
            if max(st.st_mtime_ns, st.st_ctime_ns) > limit:
                return None
            kept[path] = identity(path)
        with open(spec_abs, "rb") as f:  # unchanged since before started_ns: as verified
            spec_bytes = f.read()
        rows = [("spec", spec_abs, kept.pop(spec_abs)), ("lib", lib, identity(lib)),
                ("dir", source_dir, listing(source_dir))]
    except OSError:
        return None
    rows += [("file", path, kept_id) for path, kept_id in kept.items()]
    folder = cache_dir()
    key = fnv64(os.fsencode(spec_abs))
    data = lines_text.encode("utf-8", "surrogateescape")
    lines = os.path.join(folder, f"{key}-{fnv64(data)}.tsv")
    if any("\t" in p or "\n" in p for _, p, _ in [*rows, ("", lines, "")]):
        return None  # not a name the record's rows can hold
    os.makedirs(folder, mode=0o700, exist_ok=True)
    _write_if_other(lines, data)
    rows.insert(1, ("lines", lines, identity(lines)))
    head = "\n".join([MAGIC, *("\t".join(r) for r in rows)])
    _replace(record_path(spec_abs), head.encode("utf-8", "surrogateescape") + SEPARATOR
             + spec_bytes)
    _prune(folder, key, keep=lines)
    return lines


def _write_if_other(path: str, data: bytes) -> None:
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    _replace(path, data)


def _replace(path: str, data: bytes) -> None:
    """``data`` into ``path`` through a sibling of this process's own and a rename."""
    part = f"{path}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(part, path)
    except OSError:
        try:
            os.unlink(part)
        except OSError:
            pass
        raise


def _prune(folder: str, key: str, keep: str) -> None:
    """Remove what is old: the spec's earlier line files and parts a killed writer left after
    :data:`KEEP_OLD_S` (a program started from one may not have read it yet), the records
    not used for :data:`UNUSED_S` with their line files (a hit touches its record)."""
    now = time.time()
    names = os.listdir(folder)
    gone = set()
    for name in names:
        if name.endswith(".verified"):
            try:
                if now - os.stat(os.path.join(folder, name)).st_mtime > UNUSED_S:
                    os.unlink(os.path.join(folder, name))
                    gone.add(name[:-len(".verified")])
            except OSError:
                pass
    for name in names:
        path = os.path.join(folder, name)
        if path == keep or name.endswith(".verified"):
            continue
        try:
            old = now - os.lstat(path).st_mtime > KEEP_OLD_S
            if (old and (name.startswith(key + "-") or name.endswith(".tmp"))) or (
                    name.split("-", 1)[0] in gone):
                os.unlink(path)
        except OSError:
            pass
