"""Where the time goes: `torch.profiler` around one variant on one shape, as pandas tables.

A profile runs `wait + warmup + active` forward calls under `torch.profiler.profile` with a
schedule, so only the `active` calls are recorded. Every time is per forward call (the mean over
the active calls): on CUDA the GPU time of the kernels each aten op launched, on the CPU each aten
op's self CPU time. `charge_category` is the one rule that sorts that time into `CATEGORIES`.
"""
from __future__ import annotations

import os
import re
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, schedule

from .bench import WAITS_ON_HOST
from .correctness import Case
from .device import environment, free_memory, synchronize
from .outcome import guarded
from .pipeline import new_case, prepare
from .progress import progress_bar
from .registry import build_variant
from .shapes import Shape

CATEGORIES = ("GEMM", "attention core", "softmax", "mask construction", "masking", "LayerNorm",
              "activation", "elementwise/residual", "copy/layout", "other", "whole-layer kernel")
MASK_CATEGORIES = ("mask construction", "masking")

# aten op → category. In this layer 4-D matmul/bmm only ever computes attention's QKᵀ and PV,
# and ones/arange/comparisons/boolean ops only ever build masks.
_OPS = {
    "GEMM": "linear addmm mm",
    "attention core": "matmul bmm baddbmm scaled_dot_product_attention _scaled_dot_product_attention_math "
                      "_scaled_dot_product_flash_attention _scaled_dot_product_flash_attention_for_cpu "
                      "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
                      "_flash_attention_forward _efficient_attention_forward _cudnn_attention_forward",
    "softmax": "softmax _softmax",
    "mask construction": "ones tril triu arange ge gt le lt eq bitwise_not bitwise_and __and__ __invert__ "
                         "logical_not logical_and",
    "masking": "masked_fill masked_fill_ where",
    "LayerNorm": "layer_norm native_layer_norm",
    "activation": "gelu relu silu tanh",
    "elementwise/residual": "add add_ sub mul mul_ div div_",
    "copy/layout": "copy_ clone contiguous reshape view _unsafe_view transpose permute t expand unsqueeze select "
                   "slice unbind split cat stack as_strided to _to_copy empty empty_like empty_strided fill_ zero_",
}
_OP_CATEGORY = {f"aten::{op}": category for category, ops in _OPS.items() for op in ops.split()}
# kernel-name fragments, first match wins: only for kernels that no categorized aten op launched
_KERNELS = [
    ("whole-layer kernel", r"^_layer_kernel$"),  # kernels.whole_layer: every category in one launch
    ("masking", r"masked_fill|where"),
    ("mask construction", r"tril|triu|arange"),
    ("attention core", r"flash|fmha|attention|attn|sdpa"),
    ("GEMM", r"gemm|nvjet|cutlass|xmma|cublas|matmul|fused_linear"),  # fused_linear: LN, GEMM and epilogue
    ("softmax", r"softmax"),
    ("LayerNorm", r"layer_?norm"),
    ("activation", r"gelu|relu|silu"),
    ("copy/layout", r"copy|memcpy|memset|cat|transpose|fill"),
    ("elementwise/residual", r"elementwise|add|mul|div"),
]


KERNEL_NAME_NOISE = re.compile(r"^void |\(anonymous namespace\)::|\b(?:at::native::|at::|c10::|std::)")
KERNEL_NAME_CHARS = 90  # a table column a learner can read beside its numbers


def short_kernel_name(name: str) -> str:
    """A kernel's name for a table: without `void`, the common namespaces and the argument list, and at most
    KERNEL_NAME_CHARS long, its middle replaced by "…" (the kernel's name at the start, the template arguments
    that tell two instances apart at the end; the Chrome trace keeps the whole name)."""
    short, depth = KERNEL_NAME_NOISE.sub("", name), 0
    for i, ch in enumerate(short):  # the argument list: the first "(" outside the template arguments
        depth = max(0, depth + (ch == "<") - (ch == ">"))
        if ch == "(" and depth == 0 and i > 0:
            short = short[:i].strip()
            break
    if len(short) <= KERNEL_NAME_CHARS:
        return short
    head = 2 * KERNEL_NAME_CHARS // 3
    return short[:head] + "…" + short[-(KERNEL_NAME_CHARS - head - 1):]


def categorize(name: str) -> str:
    """The category of one aten op ("aten::…") or, by name fragments, of one kernel."""
    if name.startswith("aten::"):
        return _OP_CATEGORY.get(name, "other")
    return next((category for category, pattern in _KERNELS if re.search(pattern, name, re.IGNORECASE)), "other")


def charge_category(chain: Sequence[str], kernel: str | None = None) -> str:
    """The category that an op's time (or that of a `kernel` it launched) is charged to.

    `chain` is the op's call chain, innermost first, up to the op the layer called. A mask op anywhere
    in it wins (the copy inside `masked_fill` is masking; SDPA's conversion of a boolean mask into an
    additive one is too); otherwise the op the layer called decides (the layout copies inside
    `matmul` belong to attention); what no categorized aten op claims is sorted by the kernel's name.
    """
    ops = [categorize(op) for op in chain if op.startswith("aten::")]
    mask = [c for c in ops if c in MASK_CATEGORIES]
    if mask:
        return mask[0]
    if ops and (ops[-1] != "other" or kernel is None):
        return ops[-1]
    return categorize(kernel) if kernel else "other"


def _chain(event) -> list[str]:
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
            chain = _chain(event)
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


def leave_no_cupti_behind() -> None:
    """Ask the profiler to detach CUPTI when it stops (TEARDOWN_CUPTI=1, unless set otherwise). Left attached,
    CUPTI keeps slowing every kernel launch after the profile ends (pytorch/pytorch#144455), and every
    launch-bound timing after a profile would pay for it. Only with CUDA 12.6 or later: before, a CUDA graph
    captured after a teardown could crash on CUPTI's re-init."""
    cuda = torch.version.cuda
    if cuda and tuple(int(part) for part in cuda.split(".")[:2]) >= (12, 6):
        os.environ.setdefault("TEARDOWN_CUPTI", "1")


def profile_layer(module: torch.nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                  wait: int = 1, warmup: int = 2, active: int = 3) -> Profile:
    """Profile `module(x, key_padding_mask)`: `wait + warmup` unrecorded calls, then `active` recorded ones."""
    if wait < 0 or warmup < 0 or active < 1:
        raise ValueError(f"need wait ≥ 0, warmup ≥ 0 and active ≥ 1, got {wait}, {warmup}, {active}")
    device = x.device
    leave_no_cupti_behind()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    steps = schedule(wait=wait, warmup=warmup, active=active, repeat=1)  # one cycle: its events stay readable
    with warnings.catch_warnings(), torch.profiler.profile(activities=activities, schedule=steps) as prof:
        warnings.filterwarnings("ignore", message=".*clears events at the end of each cycle")  # one cycle here
        for _ in range(wait + warmup + active):
            module(x, key_padding_mask)
            synchronize(device)
            prof.step()
    return Profile.from_events(prof.events(), device.type)


def profile_variant(name: str, shape: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0,
                    options: dict | None = None, **schedule_steps) -> Profile:
    """Profile variant `name` on `shape` (no padding mask), with seeded weights and input."""
    case = Case(shape, dtype, device, "none", seed)
    return profile_layer(build_variant(name, case.layer, **(options or {})), case.x, **schedule_steps)


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


def kernel_timeline(module: Callable[[torch.Tensor, torch.Tensor | None], object], x: torch.Tensor,
                    key_padding_mask: torch.Tensor | None = None, trace: str | None = None,
                    warmup: int = 2) -> pd.DataFrame:
    """One call of `module` (a layer, or any callable taking `x` and the mask: a graph's replay) on a time
    axis: every GPU kernel (on the CPU, every aten op the layer called) with its start and end in µs from the
    first, its category and the idle gap before it. With `trace`, the profiler's Chrome trace is written there
    too (open it in Perfetto or chrome://tracing)."""
    device = x.device
    for _ in range(warmup):
        module(x, key_padding_mask)
    synchronize(device)
    leave_no_cupti_behind()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        module(x, key_padding_mask)
        synchronize(device)
    if trace is not None:
        prof.export_chrome_trace(trace)
        path = Path(trace)  # the trace names its own file: keep the name, not the machine's path
        path.write_text(path.read_text().replace(str(path.resolve()), path.name).replace(str(trace), path.name))
    if device.type == "cuda":
        events = [e for e in prof.events()  # kernels and copies, not the spans of annotations (nccl:…)
                  if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
        names = [(e.name, categorize(e.name)) for e in events]
    else:
        events = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name.startswith("aten::")
                  and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))]
        names = [(e.name, charge_category(_chain(e))) for e in events]
    records = sorted(({"name": n, "category": c, "start_us": e.time_range.start, "end_us": e.time_range.end}
                      for e, (n, c) in zip(events, names)), key=lambda r: r["start_us"])
    frame = pd.DataFrame.from_records(records, columns=["name", "category", "start_us", "end_us"])
    if frame.empty:
        return frame.assign(duration_us=[], gap_before_us=[])
    origin = frame.start_us.iloc[0]
    frame[["start_us", "end_us"]] -= origin
    previous_end = frame.end_us.cummax().shift(1).fillna(0.0)
    return frame.assign(duration_us=frame.end_us - frame.start_us,
                        gap_before_us=(frame.start_us - previous_end).clip(lower=0.0))


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
    category is the one most of the op's time went to.
    """
    ops = profile.ops.sort_values("time_us", ascending=False)
    timed = ops.assign(op=[_kernel_op(op, c) for op, c in zip(ops.op, ops.category)]).groupby("op", sort=False).agg(
        time_us=("time_us", "sum"), category=("category", "first"))
    counted = traffic.groupby(traffic.index.map(_kernel_op)).sum()
    table = counted.rename_axis("op").join(timed, how="inner")
    table = table[table.time_us > 0]
    seconds = table.time_us * 1e-6
    return table.assign(intensity=table.flops / table.bytes, tflops=table.flops / seconds / 1e12,
                        gbps=table.bytes / seconds / 1e9, share=table.time_us / table.time_us.sum()).reset_index()


@dataclass
class SuiteProfile:
    """Profiles of variants × rows as tidy tables, each with row, shape, variant and the environment columns."""

    runs: pd.DataFrame  # one per variant × row: status, reason, steps, step_us, total_us
    ops: pd.DataFrame
    kernels: pd.DataFrame
    categories: pd.DataFrame


def _profile_run(case: Case | None, shape: Shape, name: str, oom: str | None, options: dict,
                 schedule_steps: dict) -> tuple[dict, Profile | None]:
    """The run record of one variant on one row, and its profile if it ran."""
    run = {"row": shape.row, "shape": shape.label, "variant": name, "status": "ok", "reason": ""}
    if case is None:
        run.update(status="oom", reason=f"building inputs: {oom}")
        return run, None
    done = prepare(case, name, options=options, check=False)  # the first call: compiles, tunes, or refuses
    if done.module is None:
        run.update(status=done.status, reason=done.reason)
        return run, None
    profile, oom = guarded(lambda: profile_layer(done.module, case.x, **schedule_steps), case.device)
    if profile is None:
        run.update(status="oom", reason=oom)
    else:
        run.update(steps=profile.steps, step_us=profile.step_us, total_us=profile.total_us)
    return run, profile


def profile_suite(rows: Sequence[Shape], names: Sequence[str], dtype: torch.dtype, device: torch.device,
                  seed: int = 0, options: dict[str, dict] | None = None, show_progress: bool = True,
                  **schedule_steps) -> SuiteProfile:
    """Profile every variant in `names` on every row; infeasible, unavailable or out-of-memory runs are recorded."""
    options = options or {}
    env = environment(device, dtype)
    leading = ["row", "shape", "variant"]
    runs, tables = [], {"ops": [], "kernels": [], "categories": []}
    progress = progress_bar(rows, desc="profile", unit="row", disable=not show_progress)
    for shape in progress:
        case, oom = new_case(shape, dtype, device, seed=seed, truth=False)
        for name in names:
            progress.set_postfix_str(f"row {shape.row}: {name}")
            run, profile = _profile_run(case, shape, name, oom, options.get(name, {}), schedule_steps)
            runs.append(run)
            for attr, frames in tables.items():
                if profile is not None:
                    frames.append(getattr(profile, attr).assign(**{k: run[k] for k in leading}))
        case = None  # release this row's tensors before collecting
        free_memory(device)

    def tidy(frames: list[pd.DataFrame]) -> pd.DataFrame:
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=leading)
        return frame[leading + [c for c in frame.columns if c not in leading]].assign(**env)

    runs_frame = pd.DataFrame.from_records(runs).reindex(
        columns=leading + ["status", "reason", "steps", "step_us", "total_us"]).assign(**env)
    return SuiteProfile(runs_frame, tidy(tables["ops"]), tidy(tables["kernels"]), tidy(tables["categories"]))


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
