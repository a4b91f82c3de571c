"""kernforge.record (see docs/architecture.md)."""
