"""``onward serve``: LangGraph Server API + web page over onward's store."""

from onward.serve.app import create_app

__all__ = ["create_app"]
