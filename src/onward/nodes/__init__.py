"""Graph nodes: plan, execute, verify, finalize. ``gate`` is a routing function (graph/)."""
