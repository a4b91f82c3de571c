"""kernforge.apps (see docs/architecture.md)."""
