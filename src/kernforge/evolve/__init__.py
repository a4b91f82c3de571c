"""kernforge.evolve (see docs/architecture.md)."""
