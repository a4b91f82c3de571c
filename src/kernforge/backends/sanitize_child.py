"""``python -m kernforge.backends.sanitize_child REQUEST``: one launch of a variant on given
arguments, in a process of its own (what compute-sanitizer watches, see :mod:`.sanitize_cuda`).
Works on any backend; exit status 0 when the launch completed, 1 (with the error) otherwise."""

from __future__ import annotations

import pickle
import sys


def main(path: str) -> int:
    from . import get_backend

    with open(path, "rb") as f:
        req = pickle.load(f)  # written by this process's parent
    be = get_backend(req["backend"])
    if be.name == "cuda":  # one allocation per buffer, exact: memcheck sees past the end
        be.cp.cuda.set_allocator(None)  # type: ignore[attr-defined]
    variant = req["variant"]
    compiled = be.compile(variant, tolerant=True)
    args = [be.to_device(a) if p.pointer else a
            for p, a in zip(compiled.signature, req["args"])]
    be.launch(compiled, be.convert_args(compiled, args), variant.launch)
    be.synchronize()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which judges it
        print(f"kernforge sanitize_child: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
