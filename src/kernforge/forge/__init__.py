"""kernforge.forge (see docs/architecture.md)."""
