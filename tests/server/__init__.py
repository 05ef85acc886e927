"""The server tests: see docs/development.md."""
