"""Build and compile onward's graph; routing functions."""

from onward.graph.build import build_graph, compile_graph

__all__ = ["build_graph", "compile_graph"]
