"""``env [-i] [-u NAME]... [NAME=VALUE]... COMMAND``: the environment a command is started with.

``kernforge record -- env FOO=1 python app.py`` must run the Python application under the
in-process capture as ``python app.py`` is, with env's changes to the environment applied by
kernforge instead of by env. This module reads env's words the way GNU and BSD env do (options
first, then assignments, then the command); :func:`split_env` says which it understood.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

SUPPORTED = "-i (-, --ignore-environment), -u NAME (--unset=NAME), NAME=VALUE"
_ASSIGNMENT = re.compile(r"([^=]+)=(.*)", re.DOTALL)


@dataclass(frozen=True)
class EnvPrefix:
    """What ``env`` would do to the environment before it runs the command."""

    clear: bool = False  # -i: start from an empty environment
    unset: tuple[str, ...] = ()  # -u NAME, in order
    assign: tuple[tuple[str, str], ...] = ()  # NAME=VALUE, in order (the last one wins)
    unsupported: str | None = None  # the first option kernforge does not apply (-C DIR, -S)

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        """The environment env would give the command, started from ``base``."""
        env = {} if self.clear else dict(base)
        for name in self.unset:
            env.pop(name, None)
        env.update(self.assign)
        return env


def is_env(command: Sequence[str]) -> bool:
    return bool(command) and Path(command[0]).name == "env"


def split_env(command: Sequence[str]) -> tuple[EnvPrefix | None, list[str]]:
    """``env OPTIONS NAME=VALUE... COMMAND`` -> (the prefix, COMMAND); (None, the command) for
    one that does not start with env. An option other than those in :data:`SUPPORTED` ends
    the reading: the prefix names it in ``unsupported`` and the rest is given as it stands (what
    follows such an option, an argument of its own or the command, is not known here)."""
    if not is_env(command):
        return None, list(command)
    words = list(command[1:])
    clear, unset = False, []
    while words and words[0].startswith("-"):
        word = words.pop(0)
        if word == "--":
            break
        if word in ("-", "--ignore-environment"):
            clear = True
        elif word == "--unset" or word.startswith("--unset="):
            name = word.partition("=")[2] if "=" in word else (words.pop(0) if words else "")
            if not name:
                return EnvPrefix(unsupported=word), words
            unset.append(name)
        elif word.startswith("--"):
            return EnvPrefix(unsupported=word), words
        else:
            letters = word[1:]
            while letters:
                letter, letters = letters[0], letters[1:]
                if letter == "i":
                    clear = True
                elif letter == "u":
                    name = letters or (words.pop(0) if words else "")
                    if not name:
                        return EnvPrefix(unsupported=word), words
                    unset.append(name)
                    letters = ""
                else:
                    return EnvPrefix(unsupported=f"-{letter}"), words
    assign = []
    while words and (m := _ASSIGNMENT.fullmatch(words[0])):
        assign.append((m.group(1), m.group(2)))
        words.pop(0)
    return EnvPrefix(clear, tuple(unset), tuple(assign)), words
