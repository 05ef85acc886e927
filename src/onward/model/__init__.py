"""The run's data: state, enums, plan, records and transitions, lazy collections, budgets, field
owners."""
