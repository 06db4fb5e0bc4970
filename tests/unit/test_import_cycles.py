"""No import cycle anywhere in ``autorecovery`` (issue 30).

The import-linter ``acyclic_siblings`` contract (.importlinter) checks the modules inside each package;
this test checks the whole module graph, so a cycle that runs through two packages fails too. Every
import counts, including those inside functions and under ``TYPE_CHECKING`` (grimp's graph).
"""

from __future__ import annotations

import grimp


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_finder_names_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert strongly_connected(graph) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_module_level_import_cycle() -> None:
    g = grimp.build_graph("autorecovery")
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    cycles = strongly_connected(graph)
    described = []
    for comp in cycles:
        members = set(comp)
        edges = sorted(f"{a} -> {b}" for a in comp for b in graph[a] if b in members)
        described.append("; ".join(edges))
    assert not cycles, "import cycles (break each by moving the shared part to its own module):\n" + "\n".join(described)
