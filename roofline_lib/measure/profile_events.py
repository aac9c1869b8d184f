"""`torch.profiler` events → per-op, per-kernel and per-category tables of one layer (`Profile`).

Every time is per forward call (the mean over the recorded calls): on CUDA the GPU time of the kernels each
aten op launched, on the CPU each aten op's self CPU time; `profile_rules.charge_category` sorts it.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from torch.autograd import DeviceType

from .profile_rules import CATEGORIES, categorize, charge_category


def chain_of(event) -> list[str]:
    """Names from `event` up through its CPU parents, stopping below the profiler's step marker."""
    names = []
    while event is not None and not event.name.startswith("ProfilerStep"):
        names.append(event.name)
        event = event.cpu_parent
    return names


def _tabulate(records: list[dict], key: str, steps: int) -> pd.DataFrame:
    """Group time records by (key, category): calls and time per forward call, share of the total."""
    if not records:
        return pd.DataFrame({key: pd.Series(dtype=object), "category": pd.Series(dtype=object),
                             **{c: pd.Series(dtype=float) for c in ("calls", "time_us", "share")}})
    df = pd.DataFrame.from_records(records)
    sums = {c: (c, "sum") for c in ("time_us", "self_cpu_us") if c in df}
    table = df.groupby([key, "category"], sort=False).agg(calls=("time_us", "size"), **sums).reset_index()
    per_call = ["calls", *sums]
    table[per_call] = table[per_call] / steps
    total = table.time_us.sum()
    table["share"] = table.time_us / total if total > 0 else 0.0
    return table.sort_values("time_us", ascending=False, ignore_index=True)


def _unclaimed_kernels(events: Sequence, claimed: list[dict]) -> list[dict]:
    """GPU kernels that no CPU event lists as its own: a Triton kernel launched from Python outside any aten
    op, or a CUDA graph's kernels, has no op for the profiler to attach it to. Matched by name and duration
    against the kernels that were attached, so each is counted once; charged by its name."""
    left = Counter((k["kernel"], round(k["time_us"], 3)) for k in claimed)
    found = []
    for event in events:
        if (event.device_type != DeviceType.CUDA or event.name.startswith("ProfilerStep")
                or getattr(event, "is_user_annotation", False)):
            continue
        duration = event.time_range.end - event.time_range.start
        key = (event.name, round(duration, 3))
        if left[key]:
            left[key] -= 1
            continue
        found.append({"kernel": event.name, "category": categorize(event.name), "time_us": duration})
    return found


@dataclass
class Profile:
    """One profiled layer: per-op, per-kernel and per-category tables, times per forward call in µs.

    `ops`: op, category, calls, time_us (GPU kernel time on CUDA, self CPU time on the CPU),
    self_cpu_us, share. An op is listed once per category its time went to (the `clone` inside a
    `masked_fill` is masking, other clones are copy/layout). `kernels`: the same per GPU kernel (empty
    on the CPU). `categories`: every category of `CATEGORIES`, in order, with time_us and share.
    """

    device_type: str
    steps: int
    step_us: float  # wall time of one profiled call, host clock (synchronized on CUDA)
    ops: pd.DataFrame
    kernels: pd.DataFrame
    categories: pd.DataFrame

    @classmethod
    def from_events(cls, events: Sequence, device_type: str) -> Profile:
        """Build the tables from `torch.profiler` FunctionEvents (`prof.events()`)."""
        cuda = device_type == "cuda"
        step_events = [e for e in events  # on CUDA each step also has a GPU-side twin: count the CPU one
                       if e.name.startswith("ProfilerStep") and e.device_type == DeviceType.CPU]
        steps = max(1, len(step_events))
        ops, kernels = [], []
        for event in events:
            if event.device_type != DeviceType.CPU or event.is_async:
                continue
            chain = chain_of(event)
            launched = list(event.kernels) if cuda else []
            if not chain and not launched:  # the step marker itself: Python time between ops
                continue
            for kernel in launched:
                kernels.append({"kernel": kernel.name, "category": charge_category(chain, kernel.name),
                                "time_us": kernel.duration})
            time_us = sum(k.duration for k in launched) if cuda else event.self_cpu_time_total
            if event.name.startswith("aten::") or time_us > 0:
                ops.append({"op": chain[0] if chain else "(launched outside any op)",
                            "category": charge_category(chain, launched[0].name if launched else None),
                            "time_us": time_us, "self_cpu_us": event.self_cpu_time_total if chain else 0.0})
        for kernel in _unclaimed_kernels(events, kernels) if cuda else []:
            kernels.append(kernel)
            ops.append({"op": "(launched outside any op)", "category": kernel["category"],
                        "time_us": kernel["time_us"], "self_cpu_us": 0.0})
        op_table, kernel_table = _tabulate(ops, "op", steps), _tabulate(kernels, "kernel", steps)
        timeline = kernel_table if cuda else op_table
        time_us = timeline.groupby("category").time_us.sum().reindex(CATEGORIES, fill_value=0.0)
        total = time_us.sum()
        categories = pd.DataFrame({"category": CATEGORIES, "time_us": time_us.to_numpy(),
                                   "share": (time_us / total).to_numpy() if total > 0 else 0.0})
        step_us = sum(e.cpu_time_total for e in step_events) / steps if step_events else float("nan")
        return cls(device_type, steps, step_us, op_table, kernel_table, categories)

    @property
    def total_us(self) -> float:
        """Op time per forward call (GPU kernel time on CUDA): what the shares are shares of."""
        return float(self.categories.time_us.sum())

    def ran(self, category: str = "attention core") -> list[str]:
        """What ran for `category`, most time first: the GPU kernels' names on CUDA, the aten ops on the CPU.
        `ran()` names the attention kernel a profile saw, so prose can say which backend SDPA picked."""
        table = self.kernels if self.device_type == "cuda" else self.ops
        key = "kernel" if self.device_type == "cuda" else "op"
        mine = table[table.category == category].groupby(key, sort=False).time_us.sum()
        return list(mine.sort_values(ascending=False).index)

    def share(self, *categories: str) -> float:
        """Fraction of the total spent in `categories` (e.g. `share(*MASK_CATEGORIES)`)."""
        unknown = set(categories) - set(CATEGORIES)
        if unknown:
            raise ValueError(f"unknown categories {sorted(unknown)}: use some of {', '.join(CATEGORIES)}")
        return float(self.categories.set_index("category").loc[list(categories), "share"].sum())

