"""kernforge.cli (see docs/architecture.md)."""
