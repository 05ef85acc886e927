"""Graph nodes, one module per node: plan, approve, execute, verify, escalate, note, retry,
replan, wait, finalize (asking.py: what approve and escalate share). The scheduler and its
join node (``gate``) live in graph/schedule.py; the route table in graph/routes.py."""
