"""The PTX inside a CUDA fatbin, so that a native unit recorded from an nvcc-built program can be
tuned through the JIT (register cap, optimization level, cache mode).

``nvcc -arch=sm_90`` embeds both sm_90 machine code and compute_90 PTX; the driver picks the
machine code, so JIT options given with the fatbin change nothing. The PTX entry, loaded alone
with ``cuModuleLoadDataEx``, is compiled by the JIT under those options.

Layout (as the CUDA tools write it; the same reading as ZLUDA's): a 16-byte header (magic
``0xBA55ED50``, version, header size, size of what follows), then entries, each a header --
``kind`` (1 PTX, 2 ELF) at 0, header size at 4, padded payload size at 8 (u32), payload size at 16,
architecture at 28, flags at 40 (``0x2000`` LZ4, ``0x8000`` zstd compressed), uncompressed size at
56 -- and its payload. Compressed PTX is LZ4 block format (decompressed here) or zstd (through
the ``zstandard`` module if importable); ``cuobjdump -xptx`` is the fallback when it is on PATH.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MAGIC = 0xBA55ED50
WRAPPER_MAGIC = 0x466243B1
KIND_PTX, KIND_ELF = 1, 2
FLAG_LZ4, FLAG_ZSTD = 0x2000, 0x8000


@dataclass(frozen=True)
class FatbinEntry:
    kind: int
    arch: int  # e.g. 90
    flags: int
    payload: bytes
    uncompressed_size: int

    @property
    def compressed(self) -> bool:
        return bool(self.flags & (FLAG_LZ4 | FLAG_ZSTD))


def is_fatbin(image: bytes) -> bool:
    return len(image) >= 16 and struct.unpack_from("<I", image)[0] == MAGIC


def entries(image: bytes) -> list[FatbinEntry]:
    """Every entry of a fatbin (possibly several concatenated); [] when ``image`` is not one."""
    out: list[FatbinEntry] = []
    pos = 0
    while pos + 16 <= len(image) and struct.unpack_from("<I", image, pos)[0] == MAGIC:
        hsize, fsize = struct.unpack_from("<HQ", image, pos + 6)
        at, end = pos + hsize, min(pos + hsize + fsize, len(image))
        while at + 64 <= end:
            kind, hs, padded = struct.unpack_from("<HxxII", image, at)
            size, = struct.unpack_from("<I", image, at + 16)
            arch, = struct.unpack_from("<I", image, at + 28)
            flags, = struct.unpack_from("<Q", image, at + 40)
            full, = struct.unpack_from("<Q", image, at + 56)
            if hs < 64 or at + hs > end:
                break
            out.append(FatbinEntry(kind, arch, flags,
                                   image[at + hs:at + hs + min(size or padded, padded)], full))
            at += hs + padded
        pos = pos + hsize + fsize
    return out


def lz4_block(src: bytes, size: int) -> bytes:
    """Decompress one LZ4 block (the format of LZ4_compress_default) of ``size`` bytes."""
    out = bytearray()
    i = 0
    while i < len(src):
        token = src[i]
        i += 1
        n = token >> 4
        if n == 15:
            while True:
                b = src[i]
                i += 1
                n += b
                if b != 255:
                    break
        out += src[i:i + n]
        i += n
        if i >= len(src) or len(out) >= size:
            break
        offset = src[i] | src[i + 1] << 8
        i += 2
        m = token & 15
        if m == 15:
            while True:
                b = src[i]
                i += 1
                m += b
                if b != 255:
                    break
        m += 4
        if offset == 0 or offset > len(out):
            raise ValueError("corrupt LZ4 block")
        for _ in range(m):
            out.append(out[-offset])
    if len(out) != size:
        raise ValueError(f"LZ4 block gave {len(out)} bytes, expected {size}")
    return bytes(out)


def _payload(e: FatbinEntry) -> bytes | None:
    if e.flags & FLAG_LZ4:
        try:
            return lz4_block(e.payload, e.uncompressed_size)
        except (ValueError, IndexError):
            return None
    if e.flags & FLAG_ZSTD:
        try:
            import zstandard  # type: ignore[import-not-found]
            return bytes(zstandard.ZstdDecompressor().decompress(
                e.payload, max_output_size=e.uncompressed_size))
        except Exception:  # noqa: BLE001 - no zstandard, or a damaged payload: try cuobjdump
            return None
    return e.payload


def _cuobjdump(image: bytes, arch: int) -> bytes | None:
    tool = shutil.which("cuobjdump")
    if not tool:
        return None
    with tempfile.TemporaryDirectory(prefix="kf-fatbin-") as tmp:
        src = Path(tmp) / "image.fatbin"
        src.write_bytes(image)
        done = subprocess.run([tool, "-xptx", "all", str(src)], cwd=tmp, capture_output=True,
                              check=False, timeout=120)
        found = sorted(Path(tmp).glob("*.ptx"))
        if done.returncode or not found:
            return None
        best = [p for p in found if f"sm_{arch}" in p.name] or found
        return best[-1].read_bytes()


def ptx_for(image: bytes, cc: tuple[int, int] | None = None) -> bytes | None:
    """The PTX of a fatbin the device can JIT: the entry of the highest architecture not above
    ``cc`` (all when None), NUL-terminated; None when the fatbin holds no usable PTX."""
    limit = cc[0] * 10 + cc[1] if cc else 10_000
    ptx = sorted((e for e in entries(image) if e.kind == KIND_PTX and e.arch <= limit),
                 key=lambda e: e.arch)
    if not ptx:
        return None
    text = _payload(ptx[-1])
    if text is None or b".target" not in text[:4096]:  # not PTX as read: ask the CUDA tools
        text = _cuobjdump(image, ptx[-1].arch)
    if text is None:
        return None
    return text.rstrip(b"\0") + b"\0"
