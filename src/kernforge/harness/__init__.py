"""kernforge.harness (see docs/architecture.md)."""
