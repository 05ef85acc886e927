"""The cli tests: see docs/development.md."""
