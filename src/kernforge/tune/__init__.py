"""kernforge.tune (see docs/architecture.md)."""
