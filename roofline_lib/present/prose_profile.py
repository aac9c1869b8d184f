"""Sentences about profiles: where a layer's time goes, which attention kernel ran, where its ops land on
the roofline, what masks cost. Each takes a measured table, so the text never carries a number measured on
another GPU."""
from __future__ import annotations

import re

import pandas as pd

from ..core.shapes import Shape
from ..measure.ceilings import Ceilings
from ..measure.profile_events import Profile
from .formatting import clipped, format_us, three_digits


def mask_share_summary(shares: pd.DataFrame, before: str = "reference", after: str = "sdpa_fused_qkv") -> str:
    """A markdown paragraph from `profiling.mask_share_table`: the share of op time `before` and `after` spend
    building and applying masks (its range over rows), and on how many rows `after` still spends time on them."""
    parts, per_row = [], {}
    for name in (before, after):
        data = shares[(shares.variant == name) & shares.mask_share.notna()]
        if data.empty:
            have = ", ".join(shares.variant.unique())
            raise ValueError(f"no profiled rows for {name!r} in the table (it has {have})")
        lo, hi = data.loc[data.mask_share.idxmin()], data.loc[data.mask_share.idxmax()]
        parts.append(f"**{name}** spends {100 * lo.mask_share:.1f}% (row {lo.row}) to {100 * hi.mask_share:.1f}% "
                     f"(row {hi.row}) of its op time building and applying masks.")
        per_row[name] = data.set_index("row").mask_ms
    both = pd.concat(per_row, axis=1).dropna()
    still = both[both[after] > 0]
    if still.empty:
        parts.append(f"{after} spends no measurable time on masks: nothing is left to remove there.")
    else:
        kept = still[after] / still[before].where(still[before] > 0)
        parts.append(f"{after} still spends time on masks on {len(still)} of {len(both)} rows, "
                     f"{kept.min():.2f}× to {kept.max():.2f}× the time {before} spends on them.")
    return " ".join(parts)


ATTENTION_FAMILIES = (("cudnn", "cuDNN's fused attention"), ("flash", "FlashAttention"),
                      ("fmha|cutlass|mem_eff|efficient", "the memory-efficient (CUTLASS) kernel"))


def attention_family(kernel: str) -> str:
    """Which implementation a GPU kernel's name belongs to (cuDNN is tested first: its names contain "flash")."""
    for pattern, family in ATTENTION_FAMILIES:
        if re.search(pattern, kernel, flags=re.I):
            return family
    return "PyTorch's own kernels (matmuls and softmax: the math path)"


def attention_ran(profile: Profile, name: str) -> str:
    """A sentence naming what ran for `name`'s attention core in `profile`, from the kernel names it saw."""
    ran = profile.ran("attention core")
    if not ran:
        return f"`{name}` spent no measurable time in an attention kernel here."
    if profile.device_type != "cuda":
        return f"On the CPU `{name}`'s attention ran as aten ops: " + ", ".join(f"`{op}`" for op in ran[:3]) + "."
    return (f"`{name}`'s attention ran `{clipped(ran[0], 110)}` — {attention_family(ran[0])}"
            + (f" (and {len(ran) - 1} more kernel{'s' * (len(ran) > 2)})" if len(ran) > 1 else "") + ".")


def attention_change(before: Profile, after: Profile, names: tuple[str, str]) -> str:
    """Whether the attention kernel changed between two profiles, and its time before and after."""
    first, second = before.ran("attention core"), after.ran("attention core")
    if not first or not second:
        return ""
    us = [float(p.categories.set_index("category").loc["attention core", "time_us"]) for p in (before, after)]
    what = "kernel" if before.device_type == "cuda" else "op"
    same = (f"The same attention {what} ran for both" if first[0] == second[0] else
            f"The attention {what} changed from `{clipped(first[0], 110)}` to `{clipped(second[0], 110)}`")
    return f"{same}: attention takes {format_us(us[0])} per call in `{names[0]}`, {format_us(us[1])} in `{names[1]}`."


def share_sentence(profile: Profile, name: str, shape: Shape, *categories: str) -> str:
    """What share of `name`'s GPU time (op time on the CPU) on `shape` goes to `categories`, in µs per call."""
    table = profile.categories.set_index("category")
    us = float(table.loc[list(categories), "time_us"].sum())
    return (f"On row {shape.row} ({shape.label}) {' and '.join(categories)} take {profile.share(*categories):.0%} "
            f"of `{name}`'s {'GPU' if profile.device_type == 'cuda' else 'op'} time: {format_us(us)} of "
            f"{format_us(profile.total_us)} per call.")


def op_roofline_summary(points: pd.DataFrame, ceilings: Ceilings, name: str, min_share: float = 0.02) -> str:
    """Where the ops of `name` land, from an `op_roofline` table: each op with FLOPs (the matrix products) by its
    TFLOP/s against the roof at its intensity (the matmul ceiling right of the ridge, the bandwidth slope left
    of it); each op without FLOPs that takes `min_share` or more of the time by its GB/s against a copy's. Past
    its roof by more than a tenth (an elementwise pass can stream a little better than the plain copy that set
    the line), the ceiling was measured low."""
    shown = points[(points.flops > 0) | (points.share >= min_share)].sort_values("time_us", ascending=False)
    if shown.empty:
        return f"No op of `{name}` was placed on the roofline."
    ridge, parts, past = ceilings.ridge, [], []
    for p in shown.itertuples():
        op = f"`{p.op.removeprefix('aten::')}`"
        if p.flops > 0 and p.intensity >= ridge:
            of_roof = p.tflops / ceilings.matmul_tflops
            parts.append(f"{op} {three_digits(p.tflops)} TFLOP/s at {three_digits(p.intensity)} FLOPs per byte, "
                         f"right of the ridge: {of_roof:.2f} of the matmul ceiling")
        elif p.flops > 0:
            of_roof = p.tflops * 1e3 / (p.intensity * ceilings.copy_gbps)  # the roof there: intensity × bandwidth
            parts.append(f"{op} {three_digits(p.tflops)} TFLOP/s at {three_digits(p.intensity)} FLOPs per byte, "
                         f"left of the ridge: {of_roof:.2f} of the bandwidth roof there")
        else:
            of_roof = p.gbps / ceilings.copy_gbps
            parts.append(f"{op} {three_digits(p.gbps)} GB/s with no arithmetic, {of_roof:.2f} of a copy's")
        if of_roof > 1.1:
            past.append(op)
    text = (f"`{name}` on this device's measured ceilings ({three_digits(ceilings.matmul_tflops)} TFLOP/s, "
            f"{three_digits(ceilings.copy_gbps)} GB/s; ridge {three_digits(ridge)} FLOPs per byte), its matrix "
            f"products and the ops of {min_share:.0%} or more of its time: " + "; ".join(parts) + ".")
    if past:
        text += (f" {', '.join(past)} past the roof by more than a tenth: a ceiling was measured low (the GPU "
                 "shared with other work, or at a lower clock, while it was timed).")
    return text
