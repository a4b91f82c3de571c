"""Every registered backend passes the conformance suite (unavailable ones are skipped)."""

from kernforge.testing.backends import BackendConformance


class TestBackendConformance(BackendConformance):
    pass
