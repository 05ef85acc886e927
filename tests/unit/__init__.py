"""The unit tests: see docs/development.md."""
