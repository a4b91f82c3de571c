"""``env [-i] [-u NAME]... [NAME=VALUE]... COMMAND``: the environment a command is started with.

``kernforge record -- env FOO=1 ./app`` must run the application with env's changes to the
environment applied by kernforge instead of by env: env applying ``-i`` or ``-u LD_PRELOAD``
itself would remove the interposer's environment, and env between kernforge and
``python app.py`` would keep the in-process capture from it. This module reads env's words
the way GNU and BSD env do (options, an option's argument included, then assignments, then
the command); :func:`split_env` says which it understood.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core import ConfigError

SUPPORTED = "-i (-, --ignore-environment), -u NAME (--unset=NAME), NAME=VALUE"
_ASSIGNMENT = re.compile(r"([^=]+)=(.*)", re.DOTALL)

# env's other options, which kernforge does not apply, by whether they take an argument:
# GNU's -a ARG (--argv0), -C DIR (--chdir), -S STRING (--split-string), -v (--debug),
# -0 (--null); BSD's -P ALTPATH, -L and -U USER[/CLASS]
_SHORT_WITH_ARGUMENT = "aCPSLU"
_SHORT_FLAGS = "v0"
# GNU's long options (a unique abbreviation is accepted, as getopt does): "required" takes an
# argument (=ARG or the next word), "optional" only as =ARG, "none" none
_LONG = {"ignore-environment": "none", "unset": "required", "argv0": "required",
         "chdir": "required", "split-string": "required", "null": "none", "debug": "none",
         "default-signal": "optional", "ignore-signal": "optional", "block-signal": "optional",
         "list-signal-handling": "none", "help": "none", "version": "none"}
# what the interposer needs in the command's environment
_INTERPOSER = re.compile(r"LD_PRELOAD|KERNFORGE_.*")


@dataclass(frozen=True)
class EnvPrefix:
    """What ``env`` would do to the environment before it runs the command."""

    clear: bool = False  # -i: start from an empty environment
    unset: tuple[str, ...] = ()  # -u NAME, in order
    assign: tuple[tuple[str, str], ...] = ()  # NAME=VALUE, in order (the last one wins)
    unsupported: str | None = None  # the first option kernforge does not apply (-C, -S, ...)
    # unsupported is an option env does not have (as far as kernforge knows): the reading
    # ended there, so which of the words after it is the command is not known
    unknown: bool = False

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        """The environment env would give the command, started from ``base``."""
        env = {} if self.clear else dict(base)
        for name in self.unset:
            env.pop(name, None)
        env.update(self.assign)
        return env

    def then(self, inner: EnvPrefix) -> EnvPrefix:
        """This prefix, then ``inner`` (``env A=1 env -u B ./app``) as one."""
        if inner.clear:
            return inner
        return EnvPrefix(self.clear, self.unset + inner.unset,
                         tuple((n, v) for n, v in self.assign if n not in inner.unset)
                         + inner.assign)

    def removes_interposer(self) -> str | None:
        """The first of env's changes that would remove or replace the interposer's
        environment (LD_PRELOAD, KERNFORGE_*) were env to make them itself: ``-i``,
        ``-u NAME`` or ``NAME=VALUE``; None when there is none."""
        if self.clear:
            return "-i"
        for name in self.unset:
            if _INTERPOSER.fullmatch(name):
                return f"-u {name}"
        for name, value in self.assign:
            if _INTERPOSER.fullmatch(name):
                return f"{name}={value}"
        return None


def is_env(command: Sequence[str]) -> bool:
    return bool(command) and Path(command[0]).name == "env"


def _long(name: str) -> str | None:
    """A long option's full name: ``name`` itself or its unique abbreviation; else None."""
    if name in _LONG:
        return name
    matches = [full for full in _LONG if full.startswith(name)]
    return matches[0] if name and len(matches) == 1 else None


def _unset_name(option: str, name: str | None) -> str:
    """The variable ``-u``/``--unset`` names, refused as env refuses it."""
    if not name:
        raise ConfigError(f"env {option} names no variable to unset",
                          hint="-u NAME or --unset=NAME")
    if "=" in name:
        raise ConfigError(f"env cannot unset {name!r}: a variable's name has no '='",
                          hint="-u NAME removes the variable NAME; NAME=VALUE after env's "
                               "options sets one")
    return name


def split_env(command: Sequence[str]) -> tuple[EnvPrefix | None, list[str]]:
    """``env OPTIONS NAME=VALUE... COMMAND`` -> (the prefix, COMMAND); (None, the command) for
    one that does not start with env. Env's other options (``-C DIR``, ``-S STRING`` split
    into words as env splits it, ...) are read past, an argument of their own included, and
    the first is named in ``unsupported``; an option env does not have ends the reading (the
    prefix says ``unknown``, and the rest is given as it stands). ``-u`` without a name, or
    with one that holds '=', is a ConfigError, as env refuses it."""
    if not is_env(command):
        return None, list(command)
    words = list(command[1:])
    clear, unsupported = False, None
    unset: list[str] = []

    def unknown(word: str) -> tuple[EnvPrefix, list[str]]:
        return EnvPrefix(clear, tuple(unset), (), word, True), words

    while words and words[0].startswith("-"):
        word = words.pop(0)
        if word == "--":
            break
        if word == "-":  # as -i, and the end of the options (getopt takes '-' for a word)
            clear = True
            break
        if word.startswith("--"):
            given, eq, value = word[2:].partition("=")
            name = _long(given)
            if name is None or (eq and _LONG[name] == "none"):
                return unknown(word)
            if _LONG[name] == "required" and not eq:
                value = words.pop(0) if words else ""
            if name == "ignore-environment":
                clear = True
            elif name == "unset":
                unset.append(_unset_name(word, value))
            else:
                unsupported = unsupported or word
                if name == "split-string":
                    try:
                        words[:0] = shlex.split(value)
                    except ValueError:
                        return unknown(word)
            continue
        letters = word[1:]
        while letters:
            letter, letters = letters[0], letters[1:]
            if letter == "i":
                clear = True
            elif letter in _SHORT_FLAGS:
                unsupported = unsupported or f"-{letter}"
            elif letter == "u" or letter in _SHORT_WITH_ARGUMENT:
                value = letters or (words.pop(0) if words else "")
                letters = ""
                if letter == "u":
                    unset.append(_unset_name("-u", value))
                    continue
                unsupported = unsupported or f"-{letter}"
                if letter == "S":
                    try:
                        words[:0] = shlex.split(value)
                    except ValueError:
                        return unknown(word)
            else:
                return unknown(f"-{letter}")
    assign = []
    while words and (m := _ASSIGNMENT.fullmatch(words[0])):
        assign.append((m.group(1), m.group(2)))
        words.pop(0)
    return EnvPrefix(clear, tuple(unset), tuple(assign), unsupported), words
