"""Text on figures placed where it reads as its own: a row's number by its highest point, an op's name beside
its marker, clear of every marker and of each other and inside the axes; tick labels that name a row's shape;
a legend only where something is labelled. Labels are placed in display pixels, so a figure's layout must be
final first (`Figure.draw_without_rendering`)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

VALUE_BOX = {"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"}  # a bar's value over a line


def legend_if_labelled(owner: Figure | Axes, *args, **kwargs) -> None:
    """`owner.legend(*args, **kwargs)`, of a figure or a panel, where it has handles to show: given, or an artist
    with a label. Where nothing is labelled (no variant timed, no category with time), matplotlib would warn "No
    artists with labels found to put in legend" and draw an empty frame; here no legend is drawn."""
    axes = owner.axes if isinstance(owner, Figure) else [owner]
    if args or "handles" in kwargs or any(ax.get_legend_handles_labels()[0] for ax in axes):
        owner.legend(*args, **kwargs)


def row_labels(data: pd.DataFrame, rows: list) -> list[str]:
    """Tick labels naming each row and, where the table has it, its shape (B·N·d·H) under it."""
    if "shape" not in data:
        return [str(r) for r in rows]
    shapes = data.drop_duplicates("row").set_index("row")["shape"]
    return [f"{r}\n{shapes.get(r, '').replace(' ', chr(10))}" for r in rows]


LABEL_STEPS = (7, 16, 26, 38)  # points from a row's highest point to its label: near first, farther where crowded
LEADER_FROM = 12  # points: a label at least this far from its point gets a line to it
LABEL_ASPECT = 0.6  # a label is wider than tall: horizontal distances count this much of their length


def _label_offsets() -> list[tuple[float, float]]:
    """Candidate label offsets in points: eight directions at each of LABEL_STEPS, nearest first."""
    angles = np.deg2rad([0, 180, 90, 270, 45, 135, 315, 225])
    return [(r * np.cos(a), r * np.sin(a)) for r in LABEL_STEPS for a in angles]


def _clearance(obstacles: np.ndarray, centre: np.ndarray) -> float:
    """Display pixels from `centre` to the nearest of `obstacles` (infinite where there are none), horizontal
    distances shrunk by LABEL_ASPECT, so that a label needs more room beside a neighbour than above it."""
    if not len(obstacles):
        return np.inf
    dx, dy = (obstacles - centre).T
    return float(np.min(np.hypot(LABEL_ASPECT * dx, dy)))


def label_rows(ax, fig: Figure, data: pd.DataFrame, labelled: Sequence | None = None) -> None:
    """Each row's number (of the `labelled` rows, default all) by its highest point, at the nearest offset whose
    label keeps clear of every other row's points and of the labels already placed (a line joins it to a label
    set farther off), so that no number reads as a neighbour's."""
    ax.autoscale_view()
    px = fig.dpi / 72  # display pixels per point
    points = ax.transData.transform(np.column_stack([data.intensity, data.achieved_tflops]))
    rows = data.row.to_numpy()
    placed: list[np.ndarray] = []  # label centres so far, display px
    order = data.groupby("row", sort=False).achieved_tflops.max().sort_values(ascending=False).index  # top first
    for row in (order if labelled is None else [row for row in order if row in set(labelled)]):
        sub = data[data.row == row]
        anchor = (sub.intensity.iloc[0], sub.achieved_tflops.max())
        at = ax.transData.transform(anchor)
        obstacles = np.vstack([points[rows != row], *placed]) if len(placed) else points[rows != row]
        clearance = {o: _clearance(obstacles, at + px * np.array(o)) for o in _label_offsets()}
        wanted = 9 * px  # a label's half-size and a margin: clear enough to read as its own
        offset = next((o for o, c in clearance.items() if c >= wanted), max(clearance, key=clearance.get))
        placed.append(at + px * np.array(offset))
        far = np.hypot(*offset) >= LEADER_FROM
        ax.annotate(str(row), anchor, textcoords="offset points", xytext=offset, ha="center", va="center",
                    fontsize="x-small", arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5,
                                                    "shrinkA": 0, "shrinkB": 3} if far else None)


NAME_SHIFTS = (0, -9, 9, -15, 15, -21, 21, -27, 27, -33, 33, -39, 39)  # points above (+) or below, nearest first
NAME_FONT_PT = 6.9  # matplotlib's "x-small" at the default 10-point size
NAME_LINE = 1.2 * NAME_FONT_PT  # a name's height, ascenders and descenders included
NAME_FONT = FontProperties(size=NAME_FONT_PT)
NAME_WIDTH = TextToPath()  # a name's width in points, measured in the font it is drawn in
NAME_STEPS_OUT = (0, 20, 40)  # points further out a name may sit, where no shift beside its point is free


def _overlap(box: tuple[float, float, float, float], others: list[tuple[float, float, float, float]]) -> float:
    """The area `box` (x0, y0, x1, y1) shares with `others`, summed."""
    return sum(max(0.0, min(box[2], b[2]) - max(box[0], b[0])) * max(0.0, min(box[3], b[3]) - max(box[1], b[1]))
               for b in others)


def name_points(ax, fig: Figure, named: list[tuple[float, float, str, float]],
                 markers: list[tuple[float, float, float]]) -> None:
    """A small name beside each named point (x, y, name, marker radius in points), clear of its marker, each at
    the nearest offset (up or down, then further out; right of the point, else left of it) whose box (the text's
    measured width) covers no marker of `markers` (x, y, radius in points: every point drawn) and no
    name already placed, inside the axes, highest point first; where every offset covers something, the one
    that covers least. A name moved past its neighbours' gets a line to its point. The figure's layout must be
    done first (`Figure.draw_without_rendering`), every panel's limits final: names are placed in pixels."""
    px = fig.dpi / 72  # display pixels per point
    boxes: list[tuple[float, float, float, float]] = []  # x0, y0, x1, y1 in display px
    for x, y, r in markers:
        cx, cy = ax.transData.transform((x, y))
        boxes.append((cx - r * px, cy - r * px, cx + r * px, cy + r * px))
    for x, y, text, radius in sorted(named, key=lambda item: -item[1]):
        at = ax.transData.transform((x, y))
        gap = radius + 2  # points from the point's centre to the name
        width, half = NAME_WIDTH.get_text_width_height_descent(text, NAME_FONT, ismath=False)[0], NAME_LINE / 2  # pt
        # (x offset of the name's near end, y offset) in points, right of the point first, then left of it
        offsets = [(side * (gap + dx), dy) for side in (1, -1)
                   for dx, dy in sorted(((dx, dy) for dx in NAME_STEPS_OUT for dy in NAME_SHIFTS),
                                        key=lambda o: np.hypot(*o))]  # nearest first
        spans = {o: (o[0], o[0] + width) if o[0] > 0 else (o[0] - width, o[0]) for o in offsets}  # x, points
        candidates = {o: (at[0] + left * px, at[1] + (o[1] - half) * px, at[0] + right * px, at[1] + (o[1] + half) * px)
                      for o, (left, right) in spans.items()}
        x0, y0, x1, y1 = ax.bbox.extents  # a name may not leave the axes, onto the tick labels or the next panel
        covered = {o: _overlap(box, boxes) + (np.inf if box[0] < x0 or box[1] < y0 or box[2] > x1 or box[3] > y1
                                              else 0) for o, box in candidates.items()}
        offset = next((o for o in offsets if covered[o] == 0), min(covered, key=covered.get))
        boxes.append(candidates[offset])
        far = np.hypot(abs(offset[0]) - gap, offset[1]) > NAME_SHIFTS[2]  # past its neighbours': a line to its point
        ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, va="center",
                    ha="left" if offset[0] > 0 else "right", fontsize=NAME_FONT_PT,
                    arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5, "shrinkA": 0,
                                "shrinkB": radius} if far else None
                    ).set_in_layout(False)  # placed for the layout already done: it must not move the axes
