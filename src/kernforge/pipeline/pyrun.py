"""``python -m kernforge.pipeline.pyrun APP.py ARGS``: run a Python application under the
in-process capture, beside the preloaded driver interposer (see kernforge.record.interposer)."""

import sys

from .run_app import pyrun_main

if __name__ == "__main__":
    sys.exit(pyrun_main(sys.argv[1:]))
