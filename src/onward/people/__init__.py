"""Where a run meets a person: approvals and questions, the inbox, pending decisions, resume
tokens."""
