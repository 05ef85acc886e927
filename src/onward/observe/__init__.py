"""Looking at runs: progress events, the event log, timeline, report."""
