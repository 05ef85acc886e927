"""The docs tests: see docs/development.md."""
