"""The crash tests: see docs/development.md."""
