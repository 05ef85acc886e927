"""Models for planning, replanning and judging: optional, offline-testable, within budget."""
