"""The store tests: see docs/development.md."""
