"""kernforge.pipeline (see docs/architecture.md)."""
