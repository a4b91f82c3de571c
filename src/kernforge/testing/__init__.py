"""kernforge.testing (see docs/architecture.md)."""
