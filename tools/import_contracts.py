"""import-linter contract types of this repository (registered in pyproject.toml).

``allowed_externals``: the source packages may import the standard library and the listed
third-party packages, nothing else. Unlike a ``forbidden`` contract, which names what may
not be imported, this names what may: a new dependency fails the contract until it is
listed. Needs ``include_external_packages = true`` (external packages are then nodes of
the graph, one per top-level name).

    [[tool.importlinter.contracts]]
    name = "core is stdlib + numpy only"
    type = "allowed_externals"
    source_modules = ["kernforge.core"]
    allowed = ["numpy"]
"""

from __future__ import annotations

import sys

import grimp
from importlinter import Contract, ContractCheck, fields, output

STDLIB = frozenset(sys.stdlib_module_names)


class AllowedExternalsContract(Contract):
    """The source packages import only the standard library and ``allowed``."""

    type_name = "allowed_externals"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = set(self.session_options["root_packages"])
        allowed = set(self.allowed) | STDLIB  # type: ignore[arg-type]
        found: list[dict[str, str]] = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            modules = {source.name} | graph.find_descendants(source.name)
            for module in sorted(modules):
                for imported in sorted(graph.find_modules_directly_imported_by(module)):
                    top = imported.split(".")[0]
                    if top in roots or top in allowed:
                        continue
                    found.append({"importer": module, "imported": imported})
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["found"]:
            output.print_error(f"{item['importer']} imports {item['imported']}, which is "
                               "neither the standard library nor listed in `allowed`")
            output.new_line()
