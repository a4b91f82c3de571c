"""Every registered sampler passes the conformance suite."""

from kernforge.testing.samplers import SamplerConformance


class TestSamplerConformance(SamplerConformance):
    pass
