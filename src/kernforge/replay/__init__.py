"""kernforge.replay (see docs/architecture.md)."""
