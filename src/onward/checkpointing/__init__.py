"""Store URL → checkpointer, onward's tables and the artifact store."""

from onward.checkpointing.store import DEFAULT_URL, RunRow, Store, default_url

__all__ = ["DEFAULT_URL", "RunRow", "Store", "default_url"]
