"""kernforge.stencil (see docs/architecture.md)."""
