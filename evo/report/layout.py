"""Where each version sits in the lineage picture: x = version number, y = lane.

A git-graph layout, shared by the HTML tree and the PNG one. Lane 0 holds the
promoted path (main's history). A version continues its first parent's lane
when it is the first child to do so; other children take the lowest lane that
has been free since their parent's x, so lanes are reused and a 1,000-version
search stays readable. O(versions x lanes), one pass in version order.
"""

from __future__ import annotations


def lay_out(versions: list[tuple[str, list[str]]], path: list[str]) -> dict[str, tuple[int, int]]:
    """name -> (x, lane) for `versions` [(name, parents)] given in version order."""
    on_path = set(path)
    x_of = {name: int(name[1:]) for name, _ in versions}
    lane_of: dict[str, int] = {}
    lane_last: list[int] = [-1]  # lane -> x of its newest occupant (lane 0 is reserved for the path)
    lane_tip: list[str | None] = [None]
    for name, parents in versions:
        x = x_of[name]
        first = parents[0] if parents and parents[0] in lane_of else None
        if name in on_path:
            lane = 0
        elif first is not None and lane_of[first] != 0 and lane_tip[lane_of[first]] == first:
            lane = lane_of[first]  # the first child carries its parent's lane on
        else:
            start = x_of[first] if first is not None else x
            lane = next((i for i in range(1, len(lane_last)) if lane_last[i] < start), len(lane_last))
            if lane == len(lane_last):
                lane_last.append(-1)
                lane_tip.append(None)
        lane_of[name] = lane
        lane_last[lane] = x
        lane_tip[lane] = name
    return {name: (x_of[name], lane_of[name]) for name, _ in versions}


ELBOW = 0.35  # x distance after a parent at which a first-parent edge reaches its child's lane


def edge_points(parent: tuple[int, int], child: tuple[int, int], kind: str) -> list[tuple[float, int]]:
    """The polyline of one edge: first-parent edges step into the child's lane just after the parent
    and run along it (that stretch of the lane is free by construction); merge edges go straight."""
    (x0, y0), (x1, y1) = parent, child
    if kind == "merge" or y0 == y1:
        return [(x0, y0), (x1, y1)]
    return [(x0, y0), (x0 + ELBOW, y1), (x1, y1)]
