"""The plan as a picture: a layered left-to-right layout the page draws as SVG.

Columns are the plan's topological generations (networkx): a step stands one column
right of the last step it waits for, so every edge points right. Within a column, steps
are ordered by the mean row of the steps they wait for (one barycentre sweep, ties in
plan order), which keeps most edges short and uncrossed for plans of the sizes planners
write. The layout is computed on the server, so the page needs no graph library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx

from orchestration.plan import Plan

__all__ = ["NODE_H", "NODE_W", "DagEdge", "DagNode", "DagPicture", "layout", "plan_graph"]

NODE_W = 168
NODE_H = 46
GAP_X = 56
GAP_Y = 16
PAD = 8
LABEL_CHARS = 21


@dataclass(frozen=True, slots=True)
class DagNode:
    id: str
    tool: str
    capability: str
    status: str
    x: int
    y: int
    label: str
    sublabel: str


@dataclass(frozen=True, slots=True)
class DagEdge:
    source: str
    target: str
    path: str
    """SVG path data: a cubic curve from the right of ``source`` to the left of ``target``."""


@dataclass(frozen=True, slots=True)
class DagPicture:
    nodes: list[DagNode]
    edges: list[DagEdge]
    width: int
    height: int


def plan_graph(plan: dict[str, Any]) -> nx.DiGraph:
    """Steps as nodes (plan order kept) and an edge for each dependency: ``depends_on``
    and every ``{{step.path}}`` reference to a step of the plan."""
    model = Plan.model_validate({"steps": plan.get("steps", [])})
    graph: nx.DiGraph = nx.DiGraph()
    for step in model.steps:
        graph.add_node(step.id, tool=step.tool, capability=step.capability)
    for step in model.steps:
        for dependency in sorted(step.dependencies()):
            if dependency in graph and dependency != step.id:
                graph.add_edge(dependency, step.id)
    return graph


def _clip(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def layout(plan: dict[str, Any], statuses: dict[str, str]) -> DagPicture:
    """Positions of every step of ``plan``, coloured by ``statuses`` (default pending)."""
    graph = plan_graph(plan)
    order = {node: index for index, node in enumerate(graph.nodes)}
    if nx.is_directed_acyclic_graph(graph):
        generations = [list(g) for g in nx.topological_generations(graph)]
    else:  # a stored plan was validated, so this is defensive: one column, plan order
        generations = [list(graph.nodes)]
    row: dict[str, float] = {}
    columns: list[list[str]] = []
    for generation in generations:
        def rank(node: str) -> tuple[float, int]:
            parents = [row[p] for p in graph.predecessors(node) if p in row]
            return (sum(parents) / len(parents) if parents else float(order[node]), order[node])

        column = sorted(generation, key=rank)
        for index, node in enumerate(column):
            row[node] = float(index)
        columns.append(column)
    tallest = max((len(c) for c in columns), default=0)
    height = PAD * 2 + tallest * NODE_H + max(tallest - 1, 0) * GAP_Y
    nodes: list[DagNode] = []
    where: dict[str, tuple[int, int]] = {}
    for col, column in enumerate(columns):
        used = len(column) * NODE_H + (len(column) - 1) * GAP_Y
        top = PAD + (height - 2 * PAD - used) // 2  # centre short columns
        for index, node in enumerate(column):
            x, y = PAD + col * (NODE_W + GAP_X), top + index * (NODE_H + GAP_Y)
            where[node] = (x, y)
            data = graph.nodes[node]
            nodes.append(DagNode(
                id=node, tool=data["tool"], capability=data["capability"],
                status=statuses.get(node, "pending"), x=x, y=y, label=_clip(node),
                sublabel=_clip(f"{data['tool']}.{data['capability']}")))
    edges = []
    for source, target in graph.edges:
        (x1, y1), (x2, y2) = where[source], where[target]
        start_x, start_y, end_x, end_y = x1 + NODE_W, y1 + NODE_H // 2, x2, y2 + NODE_H // 2
        middle = (start_x + end_x) // 2
        edges.append(DagEdge(source, target, f"M{start_x},{start_y} C{middle},{start_y} "
                                             f"{middle},{end_y} {end_x - 6},{end_y}"))
    width = PAD * 2 + len(columns) * NODE_W + max(len(columns) - 1, 0) * GAP_X
    return DagPicture(nodes=nodes, edges=edges, width=width, height=height)
