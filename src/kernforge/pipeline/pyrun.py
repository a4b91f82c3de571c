"""``python -m kernforge.pipeline.pyrun APP.py ARGS``: run a Python application under the
in-process capture, beside the preloaded driver interposer (see kernforge.record.interposer)."""

import sys

if __name__ == "__main__":
    try:
        from .run_app import pyrun_main

        sys.exit(pyrun_main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C: kernforge record says what was kept (no traceback
        sys.exit(130)  # through kernforge here); units written so far are complete
