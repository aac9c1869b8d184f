"""Text on figures placed where it reads as its own: a row's number by its highest point, an op's name beside
its marker (or in a column, joined to it by a line, where markers pile up at one x, set side by side there), a
line's value beside it, clear of every marker and of each other and inside the axes; tick labels that name a
row's shape, plain log ticks; a legend only where something is labelled. Labels are placed in display pixels,
so a figure's layout must be final first (`Figure.draw_without_rendering`)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FuncFormatter, NullFormatter

from .formatting import tick_number

PLAIN_TICKS = FuncFormatter(lambda v, _: tick_number(v))  # a log axis read as 0.001, 0.1, 2, 30, 10,000
# its minor ticks, where it spans too few decades to read by the major ones: 2, 3 and 5 of each (0.2, 0.3, 0.5, 2,
# 3, 5, 20, …), which keep apart where 0.9 would touch 1
PLAIN_MINOR_TICKS = FuncFormatter(lambda v, _: tick_number(v) if f"{v:.1e}"[:3] in ("2.0", "3.0", "5.0") else "")


def row_tops(data: pd.DataFrame) -> pd.DataFrame:
    """Each row's highest point (achieved_tflops) of a roofline frame: where its number goes."""
    return data.sort_values("achieved_tflops").groupby("row", sort=False).tail(1)


def plain_log_ticks(ax) -> None:
    """Each log axis of `ax` read as plain numbers (20, 300, 4,000, not 2×10¹): the major ticks always, the minor
    ones too where fewer than two powers of ten are in view, so that the axis has numbers to read by — every one
    where it spans under half a decade, else those at 2, 3 and 5 (PLAIN_MINOR_TICKS). The limits must be final."""
    for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        if axis.get_scale() != "log":
            continue
        powers = np.floor(np.log10(high)) - np.ceil(np.log10(low)) + 1  # powers of ten in view
        axis.set_major_formatter(PLAIN_TICKS)
        axis.set_minor_formatter(NullFormatter() if powers >= 2 else PLAIN_TICKS if np.log10(high / low) < 0.5
                                 else PLAIN_MINOR_TICKS)


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels
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


def _marker_boxes(ax, px: float) -> list[Box]:
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


def label_rows(ax, fig: Figure, data: pd.DataFrame, numbered: pd.DataFrame | None = None) -> list[Box]:
    """Each point of `numbered` (rows of `data`; default each row's highest point) numbered by its row, at the
    nearest offset whose box (the text's measured size) covers no marker drawn on `ax` and no number already
    placed, stays inside the axes and, near its point, lies nearer its own row's points than any other row's (a
    line joins it to a number set farther off), so that no number reads as a neighbour's; where every offset
    covers something, the one that covers least. Highest point first. The figure's layout must be final first:
    numbers are placed in pixels. Returns the numbers' boxes (display px), for text placed after them to keep
    clear of."""
    ax.autoscale_view()
    px = fig.dpi / 72  # display pixels per point
    points = ax.transData.transform(np.column_stack([data.intensity, data.achieved_tflops]))
    rows = data.row.to_numpy()
    boxes = _marker_boxes(ax, px)  # markers, then the labels placed so far, display px
    markers = len(boxes)
    limits = ax.bbox.extents
    if numbered is None:
        numbered = row_tops(data)
    ordered = numbered.sort_values("achieved_tflops", ascending=False, kind="stable")  # highest first
    for row, anchor in zip(ordered.row, zip(ordered.intensity, ordered.achieved_tflops)):
        at = ax.transData.transform(anchor)
        others = points[rows != row]
        width = text_width(str(row)) + 2 * LABEL_PAD
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
    return boxes[markers:]


NAME_SHIFTS = (0, -9, 9, -15, 15, -21, 21, -27, 27, -33, 33, -39, 39)  # points above (+) or below, nearest first
NAME_FONT_PT = 6.9  # matplotlib's "x-small" at the default 10-point size
NAME_LINE = 1.2 * NAME_FONT_PT  # a name's height, ascenders and descenders included
NAME_FONT = FontProperties(size=NAME_FONT_PT)
NAME_WIDTH = TextToPath()  # a name's width in points, measured in the font it is drawn in


def text_width(text: str, font: FontProperties = NAME_FONT) -> float:
    """`text`'s width in points, drawn in `font`: what a label's box must hold."""
    return NAME_WIDTH.get_text_width_height_descent(text, font, ismath=False)[0]
NAME_STEPS_OUT = (0, 20, 40)  # points further out a name may sit, where no shift beside its point is free


def _overlap(box: Box, others: Sequence[Box]) -> float:
    """The area `box` (x0, y0, x1, y1) shares with `others`, summed."""
    return sum(max(0.0, min(box[2], b[2]) - max(box[0], b[0])) * max(0.0, min(box[3], b[3]) - max(box[1], b[1]))
               for b in others)


def _distance(box: Box, centre: np.ndarray, radius: float) -> float:
    """Pixels from a marker's edge (its centre and radius in px) to the nearest point of `box`; 0 where they meet."""
    dx = max(box[0] - centre[0], 0.0, centre[0] - box[2])
    dy = max(box[1] - centre[1], 0.0, centre[1] - box[3])
    return max(0.0, float(np.hypot(dx, dy)) - radius)


def name_points(ax, fig: Figure, named: list[tuple[float, float, str, float]],
                markers: list[tuple[float, float, float]], taken: Sequence[Box] = ()) -> list[Box]:
    """A small name beside each named point (x, y, name, marker radius in points), clear of its marker, each at
    the nearest offset (beside the point on either side, right of it first, before farther out, where a line
    joins it) whose box (the text's measured width) covers no marker of `markers` (x, y, radius in points: every
    point drawn), no name already placed, no box of `taken` (display px) and no line drawn on `ax`, inside the
    axes, highest point first; where every offset covers something, the one that covers least. A name set
    beside its point, without a line, must lie nearer its own marker than any other by a line's height, so that
    it never reads as a neighbour's. The figure's layout must be done first (`Figure.draw_without_rendering`),
    every panel's limits final: names are placed in pixels. Returns the names' boxes."""
    px = fig.dpi / 72  # display pixels per point
    centres = [(ax.transData.transform((x, y)), r * px) for x, y, r in markers]
    boxes = [(cx - r, cy - r, cx + r, cy + r) for (cx, cy), r in centres] + list(taken)  # display px
    placed = len(boxes)
    lines = _line_points(ax, np.nan)  # the roof and every other line: a name lies across none where it can
    for x, y, text, radius in sorted(named, key=lambda item: -item[1]):
        at = ax.transData.transform((x, y))
        others = [(c, r) for c, r in centres if np.hypot(*(c - at)) > 0.5]  # every marker but its own
        gap = radius + 2  # points from the point's centre to the name
        width, half = text_width(text), NAME_LINE / 2  # pt
        # (x offset of the name's near end, y offset) in points: beside the point (no line) before farther out,
        # right of it before left, nearest first
        steps = sorted(((dx, dy) for dx in NAME_STEPS_OUT for dy in NAME_SHIFTS), key=lambda o: np.hypot(*o))
        far = {(side * (gap + dx), dy): np.hypot(dx, dy) > NAME_SHIFTS[2] for side in (1, -1) for dx, dy in steps}
        offsets = sorted(far, key=lambda o: far[o])  # stable: within each, right first, nearest first
        spans = {o: (o[0], o[0] + width) if o[0] > 0 else (o[0] - width, o[0]) for o in offsets}  # x, points
        candidates = {o: (at[0] + left * px, at[1] + (o[1] - half) * px, at[0] + right * px, at[1] + (o[1] + half) * px)
                      for o, (left, right) in spans.items()}
        x0, y0, x1, y1 = ax.bbox.extents  # a name may not leave the axes, onto the tick labels or the next panel
        covered = {}
        for o, box in candidates.items():
            outside = box[0] < x0 or box[1] < y0 or box[2] > x1 or box[3] > y1
            own = _distance(box, at, radius * px)
            nearer = not far[o] and any(_distance(box, c, r) < own + NAME_LINE * px for c, r in others)  # as theirs
            covered[o] = _overlap(box, boxes) + _crossed(box, lines) + (np.inf if outside or nearer else 0)
        offset = next((o for o in offsets if covered[o] == 0), min(covered, key=covered.get))
        boxes.append(candidates[offset])
        ax.annotate(text, (x, y), textcoords="offset points", xytext=offset, va="center",
                    ha="left" if offset[0] > 0 else "right", fontsize=NAME_FONT_PT,
                    arrowprops={"arrowstyle": "-", "color": "gray", "linewidth": 0.5, "shrinkA": 0,
                                "shrinkB": radius} if far[offset] else None
                    ).set_in_layout(False)  # placed for the layout already done: it must not move the axes
    return boxes[placed:]


SWARM_GAP = 2  # points between markers set side by side: a name's line passes between two


def swarm(ax, fig: Figure, points: list[tuple[float, float, float]]) -> list[float]:
    """New x (data) for markers (x, y, radius in points) that share one x and would hide each other: the largest
    stays, each next one (largest first) moves right of every one placed before it at its height (a one-sided
    beeswarm, SWARM_GAP apart: room for a line between two), never into a gap left of one, where no line from the
    right could reach it; y is kept, so what the y axis reads stays true. The axes' limits must be final."""
    if not points:
        return []
    px = fig.dpi / 72  # display pixels per point
    at = ax.transData.transform([(x, y) for x, y, _ in points])
    radii = np.array([r for _, _, r in points]) * px + SWARM_GAP * px / 2
    placed: list[tuple[float, float, float]] = []  # (x, y, radius) in px
    moved = at[:, 0].copy()
    for i in np.argsort(-radii, kind="stable"):
        y, r = at[i, 1], radii[i]
        touching = [qx + np.sqrt((r + qr) ** 2 - (y - qy) ** 2) for qx, qy, qr in placed if abs(y - qy) < r + qr]
        moved[i] = max([at[i, 0], *touching])  # right of every marker at its height: none left in a pocket
        placed.append((moved[i], y, r))
    return list(ax.transData.inverted().transform(np.column_stack([moved, at[:, 1]]))[:, 0])


COLUMN_GAPS = (6, 18, 36)  # points between the rightmost marker of a pile and the column of its names, nearest first
SLOT_STEP = 0.25  # of a name's height: the heights a name of the column may take
OFFENCE = 1e6  # the cost of one thing a name or its line covers or crosses, against a point of distance
LINE_ACROSS = 0.01  # of an offence: a name's line across the roof (thin and grey, it still reads), not its name


def _crosses(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Whether segments a–b cross segments c–d (arrays of points (..., 2), broadcast; touching ends do not count)."""
    def side(p, q, r):
        return (q[..., 0] - p[..., 0]) * (r[..., 1] - p[..., 1]) - (q[..., 1] - p[..., 1]) * (r[..., 0] - p[..., 0])
    return (side(a, b, c) * side(a, b, d) < 0) & (side(c, d, a) * side(c, d, b) < 0)


def _hits(starts: np.ndarray, ends: np.ndarray, centres: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """How many of the circles (centres (m, 2), radii (m,)) each segment from `starts` (s, 2) to `ends` (s, 2)
    passes through: (s,)."""
    if not len(centres):
        return np.zeros(len(starts))
    d = ends - starts  # (s, 2)
    t = ((centres[None] - starts[:, None]) * d[:, None]).sum(axis=2) / np.maximum((d * d).sum(axis=1), 1e-9)[:, None]
    nearest = starts[:, None] + np.clip(t, 0, 1)[..., None] * d[:, None]  # (s, m, 2): each circle's nearest point
    return (np.hypot(*(nearest - centres[None]).transpose(2, 0, 1)) < radii[None]).sum(axis=1)


def _column_slots(order: list[int], steps: dict, costs: list[np.ndarray]) -> tuple[float, list[int]] | None:
    """The cheapest slots for names in `order` (bottom to top; `costs[i]` name i's cost at each slot,
    `steps[prev, this]` (slots, slots) the cost of name `this` at a slot right above `prev` at another: OFFENCE
    where their lines cross, infinite where `this` is not a name's height above): (cost, a slot per name in
    `order`), None where they do not fit. A shortest path, name by name."""
    total, back = costs[order[0]].copy(), []
    for prev, this in zip(order, order[1:]):
        step = total[:, None] + steps[prev, this]
        back.append(step.argmin(axis=0))
        total = costs[this] + step.min(axis=0)
    if not np.isfinite(total).any():
        return None
    chosen = [int(total.argmin())]
    for pointers in reversed(back):
        chosen.append(int(pointers[chosen[-1]]))
    return float(total.min()), chosen[::-1]


def _column_order(order: list[int], starts: np.ndarray, ends: list[np.ndarray], costs: list[np.ndarray],
                  apart: int) -> tuple[float, list[int], list[int]] | None:
    """The names' order bottom to top, from `order`, and their slots (`_column_slots`), that cost least, any two
    lines that cross costing OFFENCE: each name in turn moved to every other place while that lowers the cost
    (a local search; the markers' own heights need not give the order, where one line must pass round another
    marker): (cost, order, slots), None where the names do not fit."""
    slot = np.arange(len(starts))
    below = slot[:, None] <= slot[None] - apart  # (prev, this): prev below, a name's height apart
    steps = {(prev, this): np.where(below, OFFENCE * _crosses(starts[:, None], ends[prev][:, None], starts[None],
                                                              ends[this][None]), np.inf)
             for prev in order for this in order if prev != this}

    def cost_of(order):
        found = _column_slots(order, steps, costs)
        if found is None:
            return None
        cost, chosen = found
        segments = [(starts[s], ends[i][s]) for i, s in zip(order, chosen)]
        crossing = sum(bool(_crosses(*segments[j], *segments[k]))
                       for j in range(len(order)) for k in range(j + 2, len(order)))
        return cost + OFFENCE * crossing, list(order), chosen  # neighbours' crossings are in `cost` already

    best = cost_of(order)
    improved = best is not None
    while improved:
        improved = False
        for name in list(best[1]):
            rest = [i for i in best[1] if i != name]
            for place in range(len(order)):
                tried = cost_of(rest[:place] + [name] + rest[place:])
                if tried is not None and tried[0] < best[0] - 1e-9:
                    best, improved = tried, True
                    break
    return best


def name_column(ax, fig: Figure, named: list[tuple[float, float, str, float]],
                markers: list[tuple[float, float, float]]) -> list[Box]:
    """Names of points of one pile (x, y, name, marker radius in points; ops without FLOPs, all drawn at one
    intensity, where a name beside one marker is beside the next too) in a column right of every marker of the
    pile (`markers`: x, y, radius in points, named or not), each joined by a line from its left end to its own
    marker's edge. The names' heights and order are chosen together (`_column_order`) so that no line passes
    through another marker or crosses another line, no name covers a marker or a line drawn on `ax` (the roof),
    a line crosses the roof only where nothing else is free, and each name sits as near its marker's height as
    that leaves; the column stands at whichever of COLUMN_GAPS costs least. Inside the axes; where the names do not
    fit one above another in them, none is drawn. The figure's layout must be done first. Returns the names'
    boxes."""
    if not named:
        return []
    px = fig.dpi / 72  # display pixels per point
    at = ax.transData.transform([(x, y) for x, y, _, _ in named])  # (n, 2) px
    own = np.array([r for *_, r in named]) * px
    pile = ax.transData.transform([(x, y) for x, y, _ in markers])
    pile_radii = np.array([r for *_, r in markers]) * px
    covered = _marker_boxes(ax, px)  # every marker on the axes, the pile's and the others'
    lines = _line_points(ax, np.nan)
    drawn = np.concatenate([np.empty((0, 2, 2))] + [np.stack([xy[:-1], xy[1:]], axis=1) for xy in (
        line.get_transform().transform(line.get_xydata()) for line in ax.lines)])  # (m, 2, 2): the lines' segments
    height = (NAME_LINE + 2 * LABEL_PAD) * px
    widths = [text_width(text) * px for *_, text, _ in named]
    slots = np.arange(ax.bbox.y0 + height / 2, ax.bbox.y1 - height / 2, SLOT_STEP * height)  # names' centres, px
    apart = int(np.ceil(1 / SLOT_STEP))  # slots between two names' centres: a name's height
    best = None  # (cost, column's left, names bottom to top, their slots)
    for gap in COLUMN_GAPS:
        left = pile[:, 0].max() + pile_radii.max() + gap * px
        starts = np.column_stack([np.full(len(slots), left), slots])  # (s, 2): where each slot's line leaves
        ends, costs = [], []
        for i in range(len(named)):  # each name's cost at each slot, and where its line meets its marker's edge
            toward = starts - at[i]
            ends.append(at[i] + toward / np.hypot(*toward.T)[:, None] * own[i])  # (s, 2)
            others = np.hypot(*(pile - at[i]).T) > 0.5
            hits = _hits(starts, ends[i], pile[others], pile_radii[others])
            across = _crosses(starts[:, None], ends[i][:, None], drawn[None, :, 0], drawn[None, :, 1]).any(axis=1)
            boxes = [(left, y - height / 2, left + widths[i], y + height / 2) for y in slots]
            cover = np.array([_overlap(b, covered) + _crossed(b, lines) > 0 for b in boxes])
            outside = left + widths[i] > ax.bbox.x1
            costs.append(OFFENCE * (hits + cover + outside + LINE_ACROSS * across) + np.abs(slots - at[i, 1]) / px)
        order = sorted(range(len(named)), key=lambda i: (costs[i].argmin(), at[i, 1]))  # by the best height alone
        found = _column_order(order, starts, ends, costs, apart)
        if found is not None and (best is None or found[0] < best[0]):
            best = (found[0], left, *found[1:])
    if best is None:
        return []
    _, left, order, chosen = best
    boxes = []
    for i, s in zip(order, chosen):
        x, y, text, radius = named[i]
        centre = slots[s]
        boxes.append((left, centre - height / 2, left + widths[i], centre + height / 2))
        ax.annotate(text, (x, y), textcoords="offset points", xytext=((left - at[i, 0]) / px, (centre - at[i, 1]) / px),
                    ha="left", va="center", fontsize=NAME_FONT_PT, zorder=5,
                    arrowprops={"arrowstyle": "-", "color": "dimgray", "linewidth": 0.5, "shrinkA": 0,
                                "shrinkB": radius, "relpos": (0, 0.5)}  # from the name's left end to the marker's edge
                    ).set_in_layout(False)  # placed for the layout already done: it must not move the axes
    return boxes


def _line_points(ax, skip_x: float) -> np.ndarray:
    """Points every 2 px along each line drawn on `ax` (display px, (n, 2)) but a vertical one at display x
    `skip_x`: what a label beside that line must not cross."""
    pieces = [np.empty((0, 2))]
    for line in ax.lines:
        xy = line.get_transform().transform(line.get_xydata())
        xy = xy[np.isfinite(xy).all(axis=1)]
        if len(xy) < 2 or np.allclose(xy[:, 0], skip_x, atol=1):
            continue
        for a, b in zip(xy[:-1], xy[1:]):
            steps = int(np.ceil(np.hypot(*(b - a)) / 2)) + 1
            pieces.append(a + np.linspace(0, 1, steps)[:, None] * (b - a))
    return np.vstack(pieces)


def _crossed(box: Box, points: np.ndarray) -> float:
    """How many of `points` (display px, (n, 2): a line's, `_line_points`) lie inside `box`."""
    return float(((points[:, 0] > box[0]) & (points[:, 0] < box[2]) & (points[:, 1] > box[1])
                  & (points[:, 1] < box[3])).sum())


LINE_GAP = 3  # points between a vertical line and the label beside it


def label_line(ax, fig: Figure, text: str, x: float, taken: Sequence[Box] = (), size: str = "small",
               color: str = "gray") -> Box:
    """`text` beside the vertical line at data `x` (the ridge), as low as it goes where its box covers no marker
    on `ax`, no other line drawn there (the roofs, the lines between points) and no box of `taken` (the labels
    placed before it), right of the line first, else left; where no height is clear, the one that covers least.
    The figure's layout must be done first. Returns its box."""
    px = fig.dpi / 72  # display pixels per point
    font = FontProperties(size=size)
    width = (text_width(text, font) + 2 * LABEL_PAD) * px
    height = (1.2 * font.get_size_in_points() + 2 * LABEL_PAD) * px
    line_x = ax.transData.transform((x, ax.get_ylim()[0]))[0]
    obstacles = _marker_boxes(ax, px) + list(taken)
    points = _line_points(ax, line_x)
    x0, y0, x1, y1 = ax.bbox.extents
    gap = LINE_GAP * px
    candidates = [(left, bottom, left + width, bottom + height)
                  for bottom in np.arange(y0 + gap, y1 - height - gap, height / 2)  # lowest first
                  for left in (line_x + gap, line_x - gap - width)  # right of the line, then left
                  if x0 <= left and left + width <= x1]
    if not candidates:
        candidates = [(line_x + gap, y0 + gap, line_x + gap + width, y0 + gap + height)]
    costs = [_overlap(box, obstacles) + _crossed(box, points) for box in candidates]
    box = next((b for b, c in zip(candidates, costs) if c == 0), candidates[int(np.argmin(costs))])
    right = box[0] > line_x
    ax.annotate(text, (x, (box[1] + LABEL_PAD * px - y0) / (y1 - y0)), xycoords=("data", "axes fraction"),
                textcoords="offset points", xytext=(LINE_GAP + LABEL_PAD if right else -LINE_GAP - LABEL_PAD, 0),
                ha="left" if right else "right", va="bottom", fontsize=size, color=color).set_in_layout(False)
    return box
