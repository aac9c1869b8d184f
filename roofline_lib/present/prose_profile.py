"""Sentences about profiles: where a layer's time goes, which attention kernel ran, where its ops land on
the roofline, what masks cost. Each takes a measured table, so the text never carries a number measured on
another GPU."""
from __future__ import annotations

import re

import pandas as pd

from ..core.shapes import Shape
from ..measure.ceilings import Ceilings
from ..measure.profile_events import Profile
from .formatting import MISSING, clipped, format_us, percent, three_digits


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
        parts.append(f"**{name}** spends {percent(lo.mask_share)} (row {lo.row}) to {percent(hi.mask_share)} "
                     f"(row {hi.row}) of its op time building and applying masks.")
        per_row[name] = data.set_index("row").mask_ms
    both = pd.concat(per_row, axis=1).dropna()
    still = both[both[after] > 0]
    if still.empty:
        parts.append(f"{after} spends no measurable time on masks: nothing is left to remove there.")
    else:
        kept = still[after] / still[before].where(still[before] > 0)
        parts.append(f"{after} still spends time on masks on {len(still)} of {len(both)} rows, "
                     f"{three_digits(kept.min())}× to {three_digits(kept.max())}× the time {before} spends on them.")
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
    helpers = list(dict.fromkeys(_base_name(k) for k in ran[1:]))  # two instances of one kernel named once
    return (f"`{name}`'s attention ran `{clipped(ran[0], 110)}` — {attention_family(ran[0])}"
            + (f", with the helper kernel{'s' * (len(helpers) > 1)} {', '.join(f'`{h}`' for h in helpers[:2])}"
               f"{', …' if len(helpers) > 2 else ''}"
               if helpers else "") + ".")


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
    return (f"On row {shape.row} ({shape.label}) {' and '.join(categories)} take {percent(profile.share(*categories))} "
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
                         f"right of the ridge: {three_digits(of_roof)} of the matmul ceiling")
        elif p.flops > 0:
            of_roof = p.tflops * 1e3 / (p.intensity * ceilings.copy_gbps)  # the roof there: intensity × bandwidth
            parts.append(f"{op} {three_digits(p.tflops)} TFLOP/s at {three_digits(p.intensity)} FLOPs per byte, "
                         f"left of the ridge: {three_digits(of_roof)} of the bandwidth roof there")
        else:
            of_roof = p.gbps / ceilings.copy_gbps
            parts.append(f"{op} {three_digits(p.gbps)} GB/s with no arithmetic, {three_digits(of_roof)} of a copy's")
        if of_roof > 1.1:
            past.append(op)
    text = (f"`{name}` on this device's measured ceilings ({three_digits(ceilings.matmul_tflops)} TFLOP/s, "
            f"{three_digits(ceilings.copy_gbps)} GB/s; ridge {three_digits(ridge)} FLOPs per byte), its matrix "
            f"products and the ops of {min_share:.0%} or more of its time: " + "; ".join(parts) + ".")
    if past:
        text += (f" {', '.join(past)} past the roof by more than a tenth: a ceiling was measured low (the GPU "
                 "shared with other work, or at a lower clock, while it was timed).")
    return text


def where_time_goes(profile: Profile, timed: pd.Series, shape: Shape, name: str = "reference") -> str:
    """One sentence from a profile of `name` on `shape` and its timed line (`roofline.add_roofline` of a sweep):
    the two largest categories with their shares, the GEMMs' share, and the call's median time (with its p20–p80
    band) against the roofline floor, as a multiple of it and as the share of the floor's speed it runs at. The
    shares are the profile's, the milliseconds the timing's."""
    table = profile.categories[profile.categories.time_us > 0].sort_values("time_us", ascending=False)
    what = "GPU" if profile.device_type == "cuda" else "op"
    top = [f"{percent(r.share)} in `{r.category}`" for r in table.head(2).itertuples()]
    gemm = float(table.set_index("category").share.get("GEMM", 0.0))
    top[0] = top[0].replace(" in ", f" of its {what} time in ", 1)
    text = f"On row {shape.row} ({shape.label}) `{name}` spends {' and '.join(top)}"
    text += "" if "GEMM" in set(table.head(2).category) else f", and {percent(gemm)} in the GEMMs"
    return (text + f"; a call takes {three_digits(timed.median_ms)} ms (p20–p80 {three_digits(timed.p20_ms)}–"
            f"{three_digits(timed.p80_ms)}) where the roofline floor is {three_digits(timed.floor_ms)} ms: its time "
            f"is {three_digits(timed.median_ms / timed.floor_ms)}× the floor (it runs at "
            f"{three_digits(timed.fraction_of_floor)} of the floor's speed).")


KERNEL_SOURCES = (  # (a kernel name's pattern, who wrote the kernel, what to know about it); first match wins
    (r"flash|fmha|cudnn|mem_eff|efficient_attention", "fused attention kernels", ""),
    (r"^triton_|^_\w+_kernel$", "Triton kernels", ""),
    (r"^nvjet", "cuBLAS kernels",
     "nvjet is what cuBLAS calls its own GEMM kernels on Hopper GPUs (compute capability 9.0)"),
    (r"cutlass", "CUTLASS kernels", "GEMM kernels built from NVIDIA's CUTLASS templates, as cuBLAS ships some"),
    (r"xmma|gemm|gemv|splitKreduce|cublas|^(hopper|ampere|turing|volta|maxwell)_", "cuBLAS kernels",
     "cuBLAS names these GEMM kernels after the GPU architecture they are tuned for"),
    (r"^Memcpy|^Memset", "memory copies the CUDA runtime runs", ""),
    (r"elementwise|reduce_kernel|cunn_|layer_norm|tril|softmax|index|cat|fill|copy", "PyTorch's own CUDA kernels", ""),
)


def kernel_source(kernel: str) -> tuple[str, str]:
    """Who wrote a GPU kernel, read from its name (`KERNEL_SOURCES`), and what to know about that name."""
    for pattern, source, note in KERNEL_SOURCES:
        if re.search(pattern, kernel, flags=re.I):
            return source, note
    return "other kernels", ""


def _base_name(kernel: str) -> str:
    """A kernel's name without its namespaces, template arguments and argument list; for a generic wrapper
    (CUTLASS's `Kernel2<cutlass_80_…>`), the kernel it wraps."""
    name = re.sub(r"^(void )?((\w+|\(anonymous namespace\))::)*", "", kernel)
    base = name.split("<")[0].split("(")[0].strip()
    wrapped = re.match(r"Kernel\d*<(?:\w+::)*(\w+)", name)
    return wrapped.group(1) if wrapped else base


def kernel_sources(kernels: pd.DataFrame, shape: Shape) -> str:
    """One sentence from a profile's kernel table on `shape`: how many distinct kernels ran, grouped by who wrote
    them (read from their names, `kernel_source`), each group with its share of the GPU time and its kernels'
    names, most time first."""
    if kernels.empty:
        return ("On the CPU there are no GPU kernels: the profile has each op's own CPU time instead, and the "
                "kernel names appear only where a GPU ran the layer.")
    per = kernels.groupby("kernel", sort=False).time_us.sum()
    total = float(per.sum())
    groups: dict[str, list] = {}
    for kernel, us in per.sort_values(ascending=False).items():
        source, note = kernel_source(kernel)
        group = groups.setdefault(source, [0.0, [], note])
        group[0] += us
        name = _base_name(kernel)
        if name not in group[1]:
            group[1].append(name)
    parts = []
    for source, (us, names, note) in sorted(groups.items(), key=lambda item: -item[1][0]):
        listed = ", ".join(f"`{n}`" for n in names[:3]) + (", …" if len(names) > 3 else "")
        parts.append(f"{source} ({listed}), {percent(us / total) if total > 0 else MISSING} of the GPU time"
                     + (f": {note}" if note else ""))
    return (f"On row {shape.row} ({shape.label}) the GPU ran {len(per)} distinct kernels; by their names: "
            + "; ".join(parts) + ".")


def _mask_meaning(mask: tuple, scores: tuple) -> str:
    """What a mask's shape says about it, against the (B, H, N, N) scores it masks."""
    if len(scores) != 4:
        return f"a {mask} mask"
    B, _, N, _ = scores
    if tuple(mask) == (N, N):
        return (f"a {tuple(mask)} mask: one flag per query and key, the same for every sequence and head, which is "
                "the causal mask (`tril`'s triangle)")
    if len(mask) == 4 and mask[0] == B and mask[1] == mask[2] == 1 and mask[3] == N:
        return (f"a {tuple(mask)} mask: one flag per key of each sequence, the same for every query and head, which "
                "is the key padding mask")
    return f"a {tuple(mask)} mask, broadcast over the dimensions of size 1"


def masked_fill_summary(passes: pd.DataFrame, shape: Shape, padded: bool, device_type: str) -> str:
    """Sentences from `tables.masked_fill_passes` of one call: what each pass's mask is (read from its shape) and,
    for the key padding mask of a call without padding, that the pass can hide no key, with its time and share."""
    if passes.empty:
        return f"No `masked_fill` ran on row {shape.row}."
    what = "GPU" if device_type == "cuda" else "CPU"
    lines = [f"On row {shape.row} ({shape.label}) the layer ran `masked_fill` {len(passes)} "
             f"time{'s' * (len(passes) != 1)}, each over the whole {tuple(passes['scores shape'].iloc[0])} score "
             "tensor."]
    calls = passes.to_dict("records")
    meanings = [_mask_meaning(tuple(p["mask shape"]), tuple(p["scores shape"])) for p in calls]
    for p, meaning in zip(calls, meanings):
        lines.append(f"Pass {p['pass']} ({format_us(p['time_us'])} of {what} time, {percent(p['share'])} of the "
                     f"call) uses {meaning}.")
    padding = [p for p, meaning in zip(calls, meanings) if "key padding" in meaning]
    if padding and not padded:
        wasted = sum(p["time_us"] for p in padding)
        lines.append(f"This call was made without padding: every key is a real token, so the key padding mask keeps "
                     f"every key and pass {', '.join(str(p['pass']) for p in padding)} sets no score to -inf. Its "
                     f"{format_us(wasted)} per call are spent for no change in the output.")
    elif padding:
        lines.append("This call has padded keys, so the key padding mask does hide some of them.")
    return " ".join(lines)
