"""kernforge.llm (see docs/architecture.md)."""
