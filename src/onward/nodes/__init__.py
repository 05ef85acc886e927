"""Graph nodes: plan, execute (which verifies its output before committing), finalize.
``gate`` and ``escalate`` live with the routing in graph/routing.py."""
