"""CUDA source generators for stencil operators: one module per design (structure)."""
