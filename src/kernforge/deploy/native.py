"""Deploying tuned native kernels into an unchanged program, through the driver interposer.

A native deployment spec (JSON, signed) lists per kernel the launch it replaces (mangled name,
the id of the image it came from, grid, block, dynamic shared memory, and the parameter bytes
that are not pointers: the problem key) and what runs instead (module image, entry, JIT options, geometry, carveout; an entry with
``entry`` and ``new_shared_mem`` runs another function of the image, with the same parameters). ``kernforge
run --deploy SPEC -- COMMAND`` checks the signature and every image's hash, writes the
interposer's line format (record/native/kf_deploy.c) and runs the command with the interposer
preloaded; launches that match run the tuned configuration, every other launch is unchanged,
and the interposer's counts (replaced, fallbacks) are read back.

A fused (temporal) entry also holds ``"fuse": {"steps": T, "in_offset": IN, "out_offset": OUT}``:
its function, given the parameters of the first launch of a time loop's group, leaves in the
OUT buffer what T launches of the recorded kernel (IN and OUT swapped between launches) leave
there, reading only IN; the interposer holds matching launches and runs every T of them as one
launch of it (record/native/kf_defer.c). T is odd, from 3 to 63; IN and OUT are the offsets of
two 8-byte device pointers in the parameter bytes the key describes. A step of the loop may be
more than that launch: ``"companions": [{"name", "params", "in_slots", "out_slots"}, ...]``
(at most 8; absent means none) are the launches that follow it in every step, in order, each a
kernel's mangled name, its parameter bytes as hex (those of the first step's launch) and the
byte offsets of the 8-byte words in them that hold the step's IN and OUT pointers, and
optionally ``same_slots``, words (an elided diagnostic's pointers to its own buffers) that must
hold in every step what they hold in the chain's first held step; every other byte must be equal
for the launch to be the companion. Optionally ``image``: the :func:`image_id` of the module
image the companion was recorded from (absent: any image, as specs written before it); a kernel
of the same name from another image (CuPy's module for another dtype, an NVRTC program built
with other defines) is then not the companion, and the step runs unfused. Optionally ``grid``,
``block`` and ``shared_mem`` (all three): the geometry it was recorded with; a launch of it
with another (a boundary kernel whose blocks pick the faces it writes) is then not the
companion. Optionally ``launch_attrs`` (and an entry's own, its kernel's): the launch
attributes it was recorded with (:mod:`.native_guards`; absent: none). The
fused function then stands for T whole steps, the companions included: it leaves IN and OUT as
they do, and leaves to the step the interposer always holds after it whatever a companion
writes elsewhere (an elided per-step diagnostic, apps/elide_companion.py); the interposer holds
only whole matching steps.

Any entry may hold ``guards``: the module globals whose values its kernel baked in, read by the
interposer before that kernel first runs and after a write that may have reached them
(:mod:`.native_guards`). A fused entry's ``fuse`` may hold ``one_launch``, an ordinary entry
that runs the launches it holds but runs unfused (:mod:`.native_unfused`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from ..backends.jit import JIT_OPTIONS
from ..core import ConfigError
from ..core.jsonio import parse_json, sign, signature_ok, write_json_atomic
from .native_fuse_check import (  # noqa: F401  (the spec's checks, read as native.*)
    FUSE_STEPS,
    GEOMETRY,
    MAX_COMPANIONS,
    PARAMS_LIMIT,
    FusedEntryError,
    check_fuse,
    companion_problem,
    is_image_id,
)
from .native_guards import Guard, guards_problem, tagged_fields, with_guards
from .native_unfused import parts
from .specdoc import (
    LINES_MARK,
    is_native_spec,  # noqa: F401 - a name of this module too
)
from .specdoc import NATIVE_FORMAT as FORMAT

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ..core.native import NativeRecording



Geometry = tuple[tuple[int, int, int], tuple[int, int, int], int]  # grid, block, shared memory


class Companion(NamedTuple):
    """A launch that follows the fused kernel's launch in every step of the time loop: the
    kernel's mangled ``name``, the parameter bytes of its launch in the first step, and the byte
    offsets of the 8-byte pointer words in them that hold the step's IN and OUT (those of the
    fused kernel's launch of the same step). ``same_slots``: pointer words to other buffers
    (an elided diagnostic's) that must hold in every step what they hold in the first held step,
    wherever the program put the buffer. Every other byte must equal ``params``. ``image``:
    the :func:`image_id` of the image it was recorded from (None: a kernel of its name from
    any image). ``geometry``: the (grid, block, dynamic shared memory) it was recorded with
    (None: any). ``attrs``: the launch attributes it was recorded with (72 bytes each)."""
    name: str
    params: bytes
    in_slots: tuple[int, ...]
    out_slots: tuple[int, ...]
    same_slots: tuple[int, ...] = ()
    image: str | None = None
    geometry: Geometry | None = None
    attrs: tuple[bytes, ...] = ()

    def as_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "params": bytes(self.params).hex(),
                             "in_slots": list(self.in_slots), "out_slots": list(self.out_slots)}
        if self.same_slots:
            d["same_slots"] = list(self.same_slots)
        if self.geometry is not None:
            g, b, m = self.geometry
            d.update(grid=[int(x) for x in g], block=[int(x) for x in b], shared_mem=int(m))
        if self.attrs:
            d["launch_attrs"] = [bytes(a).hex() for a in self.attrs]
        return d | ({"image": self.image} if self.image is not None else {})


def problem_key(rec: NativeRecording) -> str:
    """The recorded parameter bytes as hex, with every pointer word and every byte the kernel
    writes before reading it (deploy/scratch.py) as ``xx`` (not compared)."""
    from .scratch import scratch_ranges  # a parser: not needed to deploy a spec

    raw = rec.param_bytes.hex()
    masked = list(raw)
    ignored = [(off, 8) for off, _ in rec.pointer_words()] + list(scratch_ranges(rec))
    n = len(rec.param_bytes)
    for off, size in ignored:
        lo, hi = min(off, n), min(off + size, n)  # never past the parameter buffer
        masked[2 * lo:2 * hi] = "x" * (2 * (hi - lo))
    return "".join(masked)


def image_id(image: bytes) -> str:
    """The interposer's id of a module image (FNV-1a 64 of its bytes, 0 written as 1:
    ``kf_image_id``), as 16 hex digits: a deployment entry replaces launches of kernels from
    that image only."""
    h = 0xCBF29CE484222325
    for b in image:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h or 1:016x}"


_IMAGE_IDS: dict[str, str] = {}  # blob id (content-addressed) -> image_id: hashed once


def recorded_image_id(rec: NativeRecording, blob: str | None = None) -> str:
    """:func:`image_id` of the image ``rec`` was recorded from (or of its image blob ``blob``:
    a sequence launch's, ``NativeLaunch.image``), computed once per image (a pure-Python hash:
    about 0.1 s per MiB; the units of one module share it)."""
    blob = rec.image if blob is None else blob
    if blob not in _IMAGE_IDS:
        _IMAGE_IDS[blob] = image_id(rec.blob(blob).tobytes())
    return _IMAGE_IDS[blob]


def new_geometry(rec: NativeRecording, variant: Mapping[str, Any]
                 ) -> tuple[list[int], list[int]]:
    block = variant.get("block") or list(rec.block)
    grid = [-(-g * b // nb) for g, b, nb in zip(rec.grid, rec.block, block)]
    return grid, list(block)


def entry(rec: NativeRecording, variant: Mapping[str, Any], image: str, image_bytes: bytes,
          evidence: Mapping[str, Any]) -> dict[str, Any]:
    """One deployment entry: ``variant`` (NativeVariant JSON) of ``rec`` run from the image
    stored as ``image`` beside the spec (its bytes given, to be hashed)."""
    grid, block = new_geometry(rec, variant)
    return {"kernel": rec.entry, "name": rec.name, "grid": list(rec.grid),
            "block": list(rec.block), "shared_mem": rec.shared_mem, "key": problem_key(rec),
            "device": rec.identity.get("device"), "source_image": recorded_image_id(rec),
            "image": image,
            "image_sha256": hashlib.sha256(image_bytes).hexdigest(),
            "jit": dict(variant.get("jit") or {}), "new_grid": grid, "new_block": block,
            "carveout": _carveout(rec, variant.get("carveout")), "evidence": dict(evidence)}


def _carveout(rec: NativeRecording, chosen: int | None) -> int | None:
    """The carveout a replacement runs with: the one tuning chose, else the one the program set
    on the recorded kernel (its replay ran with it), else none (the driver's default)."""
    if chosen is not None:
        return chosen
    recorded = dict(rec.func_attrs.set).get(9)  # PREFERRED_SHARED_MEMORY_CARVEOUT
    return recorded if recorded is not None and 0 <= recorded <= 100 else None


def replacement_entry(rec: NativeRecording, *, image: str, image_bytes: bytes, entry_name: str,
                      grid: Sequence[int], block: Sequence[int], shared_mem: int,
                      carveout: int | None, evidence: Mapping[str, Any],
                      guards: Sequence[Guard] = ()) -> dict[str, Any]:
    """An entry whose launch runs another function: ``entry_name`` of the image (a kernel with
    the recorded kernel's parameter layout, which receives the original parameter buffer, e.g.
    an operator adapter, apps/adapter.py) with its own geometry and dynamic shared memory;
    ``guards``: the globals whose values it baked in (:mod:`.native_guards`)."""
    e = entry(rec, {"block": list(block)}, image, image_bytes, evidence)
    e.update({"entry": entry_name, "new_grid": list(grid), "new_block": list(block),
              "new_shared_mem": int(shared_mem), "carveout": carveout, "jit": {}})
    return with_guards(e, guards)


def fused_entry(rec: NativeRecording, *, image: str, image_bytes: bytes, entry_name: str,
                grid: Sequence[int], block: Sequence[int], shared_mem: int, steps: int,
                in_offset: int, out_offset: int, evidence: Mapping[str, Any],
                carveout: int | None = None, companions: Sequence[Companion] = (),
                guards: Sequence[Guard] = ()) -> dict[str, Any]:
    """A fused entry: ``entry_name`` of the image runs ``steps`` steps of the time loop at once,
    each a launch of the recorded kernel (the loop's buffers at ``in_offset`` and
    ``out_offset`` of the parameters swapped between steps) followed by the ``companions``;
    held only with the launch attributes ``rec`` was recorded with; checked as
    :func:`read_spec` checks it."""
    e = replacement_entry(rec, image=image, image_bytes=image_bytes, entry_name=entry_name,
                          grid=grid, block=block, shared_mem=shared_mem, carveout=carveout,
                          evidence=evidence, guards=guards)
    if rec.launch_attrs:
        e["launch_attrs"] = [bytes(a).hex() for a in rec.launch_attrs]
    e["fuse"] = {"steps": steps, "in_offset": in_offset, "out_offset": out_offset}
    if companions:
        e["fuse"]["companions"] = [Companion(*c).as_json() for c in companions]
    check_fuse(e, "the new entry")
    return e


def check_guards(e: Mapping[str, Any], where: str) -> None:
    """Raise :class:`ConfigError` unless ``e``'s guards (if any) are ones the interposer
    reads."""
    why = guards_problem(e["guards"]) if "guards" in e else None
    if why:
        raise ConfigError(f"{where}: the entry of {e.get('name') or e.get('kernel')} {why}",
                          hint="export the spec again from the tuning run")


def write_spec(path: Path, entries: Sequence[dict[str, Any]], images: Mapping[str, bytes]
               ) -> Path:
    """The spec at ``path`` and its images beside it (``<spec stem>.images/``)."""
    img_dir = path.parent / f"{path.stem}.images"
    img_dir.mkdir(parents=True, exist_ok=True)
    for name, data in images.items():
        (img_dir / name).write_bytes(data)
    doc = sign({"format": FORMAT, "version": 1, "images": img_dir.name,
                "entries": list(entries)})
    return write_json_atomic(path, doc)


class NativeSpec(NamedTuple):  # a NamedTuple: no dataclasses imported to deploy one
    path: Path
    entries: tuple[dict[str, Any], ...]

    def image_path(self, e: Mapping[str, Any]) -> Path:
        return self.path.parent / f"{self.path.stem}.images" / e["image"]


def read_spec(path: Path) -> NativeSpec:
    try:
        doc = parse_json(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"cannot read the deployment spec {path}: {exc}",
                          hint="give a spec written by kernforge export") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a native deployment spec")
    if signature_ok(doc) is not True:
        raise ConfigError(f"{path}: the spec's signature does not match its contents",
                          hint="it was edited or damaged; export it again from the run")
    spec = NativeSpec(path, tuple(doc["entries"]))
    for entry_ in spec.entries:
        check_fuse(entry_, str(path))
        for e in parts(entry_):  # a fused entry's one-launch replacement has an image too
            check_guards(e, str(path))
            img = spec.image_path(e)
            if not img.is_file() or \
                    hashlib.sha256(img.read_bytes()).hexdigest() != e["image_sha256"]:
                raise ConfigError(f"{path}: the image of {e['name']} ({img}) is missing or "
                                  "altered", hint="export the spec again from the tuning run")
    return spec


def interposer_lines(spec: NativeSpec) -> str:
    """The interposer's deployment file (one tab-separated line an entry; a fused entry's
    one-launch replacement on the line after it, which says so with ``unfused:next``)."""
    lines = [LINES_MARK + str(spec.path).replace("\n", " ")]
    for e in spec.entries:
        one = (e.get("fuse") or {}).get("one_launch")
        lines.append("\t".join(_line_fields(spec, e) + (["unfused:next"] if one else [])))
        if one:
            lines.append("\t".join(_line_fields(spec, one)))
    return "\n".join(lines) + "\n"


def _line_fields(spec: NativeSpec, e: Mapping[str, Any]) -> list[str]:
    """Entry ``e``'s fields in kf_deploy.c's format."""
    unknown = sorted(set(e["jit"]) - set(JIT_OPTIONS))
    if unknown:
        raise ConfigError(f"{spec.path}: entry {e['name']} has JIT options the interposer "
                          f"does not apply: {', '.join(unknown)}",
                          hint=f"kernforge writes only {', '.join(JIT_OPTIONS)}; export "
                               "the spec again from the tuning run")
    jit = ",".join(f"{JIT_OPTIONS[k]}={int(v)}" for k, v in e["jit"].items()) or "-"
    carve = -1 if e.get("carveout") is None else int(e["carveout"])
    fields = [e["kernel"], ",".join(map(str, e["grid"])), ",".join(map(str, e["block"])),
              str(e["shared_mem"]), e["key"] or "*", str(spec.image_path(e).resolve()),
              e.get("entry", e["kernel"]), jit, ",".join(map(str, e["new_grid"])),
              ",".join(map(str, e["new_block"])),
              str(e.get("new_shared_mem", e["shared_mem"])), str(carve),
              e.get("source_image") or "-"]
    if e.get("fuse") is not None:
        check_fuse(e, str(spec.path))
        f = e["fuse"]
        comps = f.get("companions") or []
        placed = any("grid" in c for c in comps)  # six fields each (geometry)
        imaged = placed or any("image" in c for c in comps)  # five fields, else four
        width = ":6" if placed else ":5" if imaged else ""
        fields.append(f"fuse:{f['steps']}:{f['in_offset']}:{f['out_offset']}"
                      + (f":{len(comps)}" if comps else "") + width)
        for c in comps:  # kf_deploy.c's format; "xx": as the first held step's
            hexp = list(c["params"])
            for o in c.get("same_slots", ()):
                hexp[2 * o:2 * o + 16] = "x" * 16
            fields += [c["name"], "".join(hexp) or "-",
                       ",".join(map(str, c["in_slots"])) or "-",
                       ",".join(map(str, c["out_slots"])) or "-"]
            fields += [c.get("image") or "-"] if imaged else []
            fields += [_geometry_field(c)] if placed else []
    if e.get("guards"):
        check_guards(e, str(spec.path))
        fields += [] if e.get("fuse") is not None else ["-"]  # field 14: no fusion
    fields += tagged_fields(e)
    if any(not f or "\t" in f or "\n" in f or "\r" in f or "\0" in f for f in fields):
        raise ConfigError(f"{spec.path}: entry {e['name']} has an empty field or one "
                          "holding a tab, a line break or a NUL byte",
                          hint="the interposer reads one entry a line, fields "
                               "separated by tabs; export the spec again")
    return fields


def _geometry_field(c: Mapping[str, Any]) -> str:
    """A companion's geometry as kf_deploy.c reads it: "gx,gy,gz/bx,by,bz/shmem", or "-"."""
    if "grid" not in c:
        return "-"
    return "/".join([",".join(map(str, c["grid"])), ",".join(map(str, c["block"])),
                     str(c["shared_mem"])])


def read_log(path: Path) -> dict[str, Any]:
    """The interposer's counts, written at the program's exit ({} if it never exited cleanly)."""
    try:
        return dict(json.loads(path.read_text("utf-8")))
    except (OSError, ValueError):
        return {}
