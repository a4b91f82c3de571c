"""The JIT options kernforge tunes, by the ``CUjit_option`` ids of cuda.h: the driver
(:mod:`.driver`) passes them to ``cuModuleLoadDataEx``, a native spec's lines
(:mod:`kernforge.deploy.native`) name them for the interposer. Here alone, so that deploying a
native spec does not import the driver's bindings."""

JIT_OPTIONS = {"max_registers": 0, "threads_per_block": 1, "optimization_level": 7,
               "cache_mode": 14}
