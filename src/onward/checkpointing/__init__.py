"""LangGraph's checkpoint savers (one durable commit per plan step) and onward's serializer."""
