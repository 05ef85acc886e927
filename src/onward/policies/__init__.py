"""Policies as validated values: the run policy (approvals, deadlines), retry, the path rule
(confine) and the network rule (egress)."""
