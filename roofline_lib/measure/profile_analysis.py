"""What profiles say, compared and combined: before against after, host against kernel time, each op on the
roofline, and the share spent on masks."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .profile_events import Profile
from .profile_rules import CATEGORIES
from .timing import WAITS_ON_HOST


def diff_profiles(before: Profile, after: Profile, by: str = "op") -> pd.DataFrame:
    """What changed from `before` to `after`, per op, kernel or category (µs per forward call).

    Columns: before_us, after_us, delta_us (after − before), calls before/after (ops and kernels), and
    change: "removed" (only before), "added" (only after) or "in both". Largest moves first.
    """
    if by not in ("op", "kernel", "category"):
        raise ValueError(f"by must be 'op', 'kernel' or 'category', got {by!r}")
    sides = {}
    for side, profile in (("before", before), ("after", after)):
        if by == "kernel" and profile.device_type != "cuda":
            raise ValueError("a CPU profile has no GPU kernels: compare by='op' or by='category'")
        table = {"op": profile.ops, "kernel": profile.kernels, "category": profile.categories}[by]
        count = table.calls if by != "category" else (table.time_us > 0).astype(float)
        sides[side] = table.assign(count=count).groupby(by)[["time_us", "count"]].sum()
    both = pd.concat(sides, axis=1).fillna(0.0)  # columns (side, time_us | count)
    was, now = both["before", "count"] > 0, both["after", "count"] > 0
    out = pd.DataFrame({"before_us": both["before", "time_us"], "after_us": both["after", "time_us"]})
    if by != "category":
        out["calls_before"], out["calls_after"] = both["before", "count"], both["after", "count"]
    out["delta_us"] = out.after_us - out.before_us
    out["change"] = np.select([was & ~now, now & ~was], ["removed", "added"], "in both")
    out = out[was | now].sort_values("delta_us", key=abs, ascending=False)
    return out.rename_axis(by).reset_index()


def launch_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Host time against kernel time per call, from `SuiteProfile.runs`: `call_us` is one profiled call's
    wall time (host clock, synchronized), `kernel_us` its kernels' GPU time (on the CPU: its ops' own time).
    Where the kernels fill less than half of the call (`busy` < WAITS_ON_HOST), the GPU mostly waits for the
    host to launch them: launch overhead, not FLOPs or bytes, sets the time there."""
    ran = runs[runs.status.eq("ok")]
    table = ran[["row", "shape", "variant", "step_us", "total_us"]].rename(
        columns={"step_us": "call_us", "total_us": "kernel_us"})
    busy = table.kernel_us / table.call_us
    return table.assign(busy=busy, idle_us=table.call_us - table.kernel_us, waits_on_host=busy < WAITS_ON_HOST)



_INNER_ATTENTION = {f"aten::_{kind}_attention_forward": f"aten::_scaled_dot_product_{kind}_attention"
                    for kind in ("flash", "efficient", "cudnn")}


def _kernel_op(op: str, category: str = "") -> str:
    """One name for an op and the op whose kernel does its work, as the traffic (which sees only the op the
    layer's call reached) names it: the profile charges a `masked_fill`'s time to the `masked_fill_` and the
    `copy_` of the clone inside it, a `clone`'s to its `copy_`, and SDPA's to its backend's inner forward."""
    op = _INNER_ATTENTION.get(op, op).removesuffix("_")
    if op in ("aten::copy", "aten::clone") and category == "masking":  # the clone inside masked_fill
        return "aten::masked_fill"
    return "aten::copy" if op == "aten::clone" else op


def op_roofline(profile: Profile, traffic: pd.DataFrame) -> pd.DataFrame:
    """Each op of one layer on the roofline: its time per call from `profile` (GPU kernel time on CUDA),
    its FLOPs and bytes from `roofline.op_traffic`, so intensity (FLOPs / byte), achieved TFLOP/s and GB/s.

    An op that does no matrix product has 0 FLOPs: its intensity is 0, and GB/s is what places it. The
    category is the one most of the op's time went to; `profiled_as` names the profiler's ops whose time it
    sums (a `masked_fill` takes the `copy_` of the clone it makes), so no merge goes unsaid.
    """
    ops = profile.ops.sort_values("time_us", ascending=False)
    named = ops.assign(profiled_as=ops.op.str.removeprefix("aten::"),
                       op=[_kernel_op(op, c) for op, c in zip(ops.op, ops.category)])
    timed = named.groupby("op", sort=False).agg(time_us=("time_us", "sum"), category=("category", "first"),
                                                profiled_as=("profiled_as", lambda s: " + ".join(sorted(set(s)))))
    counted = traffic.groupby(traffic.index.map(_kernel_op)).sum()
    table = counted.rename_axis("op").join(timed, how="inner")
    table = table[table.time_us > 0]
    seconds = table.time_us * 1e-6
    return table.assign(intensity=table.flops / table.bytes, tflops=table.flops / seconds / 1e12,
                        gbps=table.bytes / seconds / 1e9, share=table.time_us / table.time_us.sum()).reset_index()



def mask_share_table(categories: pd.DataFrame) -> pd.DataFrame:
    """Per row × variant: time building masks, applying them, both, and their share of the total (ms per call).

    `categories` is `SuiteProfile.categories`; environment columns are carried over.
    """
    keys = ["row", "shape", "variant"]
    env = [c for c in ("device", "torch", "triton", "dtype", "date") if c in categories]
    wide = categories.pivot_table(index=keys, columns="category", values="time_us", aggfunc="sum", sort=False)
    wide = wide.reindex(columns=list(CATEGORIES), fill_value=0.0) / 1e3
    out = pd.DataFrame({"total_ms": wide.sum(axis=1), "mask_construction_ms": wide["mask construction"],
                        "masking_ms": wide["masking"]})
    out["mask_ms"] = out.mask_construction_ms + out.masking_ms
    out["mask_share"] = out.mask_ms / out.total_ms.where(out.total_ms > 0)
    out = out.reset_index()
    return out.merge(categories[keys + env].drop_duplicates(keys), on=keys) if env else out
