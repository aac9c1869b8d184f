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


LABEL_STEPS = (0, 9, 19, 31)  # points beyond the marker's edge: beside it first, farther out where crowded
LEADER_FROM = 9  # points beyond the edge: a label this far out gets a line to its point
LABEL_GAP = 1.5  # points between a marker's edge and a label's box
LABEL_PAD = 0.5  # points of margin round a label's text, so that two labels never touch
MARKER_RADIUS = 2.5  # points: the plots' markers (s=22 is an area of 22 points², a radius of 2.35)


def _label_offsets(half_width: float, half_height: float) -> list[tuple[tuple[float, float], float]]:
    """Candidate offsets (x, y) in points of a label's centre from its point, with how far beyond the marker's
    edge each lies: eight directions at each of LABEL_STEPS, the label's box just clear of the marker at the
    first step, nearest first."""
    angles = np.deg2rad([0, 180, 90, 270, 45, 135, 315, 225])
    clear = MARKER_RADIUS + LABEL_GAP
    return [((np.cos(a) * (half_width + clear + r), np.sin(a) * (half_height + clear + r)), r)
            for r in LABEL_STEPS for a in angles]


def _marker_boxes(ax, px: float) -> list[tuple[float, float, float, float]]:
    """Every scatter marker drawn on `ax` as a box (x0, y0, x1, y1) in display pixels."""
    boxes = []
    for collection in ax.collections:
        sizes = collection.get_sizes()
        offsets = collection.get_offsets()
        if not len(sizes) or not len(offsets):
            continue
        radii = np.broadcast_to(np.sqrt(sizes) / 2 * px, (len(offsets),))  # s is the marker's area in points²
        for (cx, cy), r in zip(ax.transData.transform(offsets), radii):
            boxes.append((cx - r, cy - r, cx + r, cy + r))
    return boxes


def label_rows(ax, fig: Figure, data: pd.DataFrame, labelled: Sequence | None = None) -> None:
    """Each row's number (of the `labelled` rows, default all) by its highest point, at the nearest offset whose
    box (the text's measured size) covers no marker drawn on `ax` and no label already placed, stays inside the
    axes and, near its point, lies nearer its own row's point than any other row's (a line joins it to a label
    set farther off), so that no number reads as a neighbour's; where every offset covers something, the one
    that covers least. The figure's layout must be final first: labels are placed in pixels."""
    ax.autoscale_view()
    px = fig.dpi / 72  # display pixels per point
    points = ax.transData.transform(np.column_stack([data.intensity, data.achieved_tflops]))
    rows = data.row.to_numpy()
    boxes = _marker_boxes(ax, px)  # markers, then the labels placed so far, display px
    limits = ax.bbox.extents
    order = data.groupby("row", sort=False).achieved_tflops.max().sort_values(ascending=False).index  # top first
    for row in (order if labelled is None else [row for row in order if row in set(labelled)]):
        sub = data[data.row == row]
        anchor = (sub.intensity.iloc[0], sub.achieved_tflops.max())
        at = ax.transData.transform(anchor)
        others = points[rows != row]
        width = NAME_WIDTH.get_text_width_height_descent(str(row), NAME_FONT, ismath=False)[0] + 2 * LABEL_PAD
        half = np.array([width, NAME_LINE + 2 * LABEL_PAD]) / 2 * px
        covered, beyond = {}, dict(_label_offsets(*(half / px)))
        for offset, out in beyond.items():
            centre = at + px * np.array(offset)
            box = (*(centre - half), *(centre + half))
            outside = box[0] < limits[0] or box[1] < limits[1] or box[2] > limits[2] or box[3] > limits[3]
            near = out < LEADER_FROM  # no line to its point: it must read as its own row's
            nearer = near and len(others) and np.hypot(*(others - centre).T).min() < np.hypot(*(at - centre))
            covered[offset] = _overlap(box, boxes) + (np.inf if outside or nearer else 0)
        offset = next((o for o, c in covered.items() if c == 0), min(covered, key=covered.get))
        centre = at + px * np.array(offset)
        boxes.append((*(centre - half), *(centre + half)))
        far = beyond[offset] >= LEADER_FROM
        ax.annotate(str(row), anchor, textcoords="offset points", xytext=offset, ha="center", va="center",
                    fontsize=NAME_FONT_PT, arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5,
                                                       "shrinkA": 0, "shrinkB": 3} if far else None
                    ).set_in_layout(False)  # placed for the layout already done: it must not move the axes


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
