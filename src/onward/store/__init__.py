"""The store behind a URL: SQLite or Postgres, runs, queue, leases, breakers, artifacts,
encryption."""
