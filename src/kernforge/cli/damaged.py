"""Damaged units a command skipped: each named with its reason as it is met, the healthy units
still processed and reported, and the command's exit status :data:`EXIT_SKIPPED` (7) at the end
when any was skipped and nothing else failed (README, "Exit statuses").

One list per command invocation: :func:`kernforge.cli.main.main` clears it before the command
and reads it after."""

from __future__ import annotations

from ..core.errors import KernforgeError

EXIT_SKIPPED = 7

_skipped: list[str] = []


def reset() -> None:
    _skipped.clear()


def skip(why: KernforgeError | str) -> None:
    """Note a damaged unit (or result) as skipped and say so now, with its reason."""
    text = why.message if isinstance(why, KernforgeError) else why
    if text in _skipped:  # met twice (loaded, then replayed): one warning, one count
        return
    _skipped.append(text)
    from rich.markup import escape  # here, not at import: `kernforge run` stays lean

    from .output import err_console

    err_console.print(f"[yellow]warning: skipped a damaged unit:[/] {escape(text)}",
                      soft_wrap=True)


def skipped() -> list[str]:
    return list(_skipped)


def final_status(status: int) -> int:
    """The command's exit status: its own when it failed, else 7 when a unit was skipped."""
    if not _skipped:
        return status
    n = len(_skipped)
    from .output import err_console

    err_console.print(f"[yellow]{n} damaged unit(s) skipped[/] (reasons above); the others' "
                      f"results are complete. Re-record the damaged ones or move them out "
                      f"of the directory.", soft_wrap=True)
    return status if status != 0 else EXIT_SKIPPED
