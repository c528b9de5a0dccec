"""The code's layout as the README states it: packages import only downward (data <- features <- models <-
pipelines), and no two project modules import each other, directly or around a circle, function-level imports
included (a circle hidden behind a function-level import still ties the modules together)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("data", "features", "models", "pipelines")  # each may import the ones before it


def import_graph() -> nx.DiGraph:
    """Edges module -> project module it imports (anywhere in its file; a ``from package import name`` of a submodule
    counts as importing that submodule)."""
    modules = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            modules[name] = path
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            graph.add_edges_from((name, t) for t in targets if t in modules and t != name)
    return graph


def test_no_import_circle_between_project_modules():
    circles = [" -> ".join([*c, c[0]]) for c in nx.simple_cycles(import_graph())]
    assert not circles, "import circles:\n" + "\n".join(sorted(circles)[:20])


def test_packages_import_only_downward():
    rank = {p: i for i, p in enumerate(LAYERS)}
    upward = sorted(f"{a} -> {b}" for a, b in import_graph().edges if rank[b.split(".")[0]] > rank[a.split(".")[0]])
    assert not upward, "upward imports:\n" + "\n".join(upward[:20])


def test_the_graph_sees_function_level_imports():
    """The check can fail: a function-level import is an edge of the graph."""
    graph = import_graph()
    assert graph.has_edge("models.serving", "models.llm")  # Predictor._predict_llm's function-level import
