"""What the CLI tests share."""

from __future__ import annotations

from kernforge.cli.main import main


def run(*argv: str) -> int:
    """``kernforge ARGV``'s exit status, in this process (argparse's usage errors included)."""
    try:
        return main(list(argv))
    except SystemExit as exc:  # argparse: usage errors
        return int(exc.code or 0)
