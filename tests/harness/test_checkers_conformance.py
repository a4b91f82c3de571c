"""Every checker of the harness passes the checker conformance suite."""

from kernforge.testing.checkers import CheckerConformance


class TestCheckerConformance(CheckerConformance):
    pass
