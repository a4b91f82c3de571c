"""Names a package exports, imported from their module on first use (PEP 562), so that
importing a package costs only what its caller uses (``kernforge run`` stays lean)."""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # no typing at import: every lazy package imports this module
if TYPE_CHECKING:  # pragma: no cover - typing only
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], names: Sequence[str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps each exported
    name to the submodule that defines it; a name, once imported, is kept in the package."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # the next lookup finds it directly
        return value

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__
