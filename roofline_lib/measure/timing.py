"""Timing as docs/design.md §4 asks: warm-up, interleaved repetitions, median with p20/p80, noise verdicts,
and the one protocol for the time of a layer call (`time_layer_calls`, `PROTOCOL`).

On CUDA each call is timed with CUDA events, after the L2 cache is flushed; on the CPU with the host's
clock (`host_clock`), so everything also runs (slowly, and only for structure) without a GPU. The CPU
timings take that clock as a parameter (`clock`), so a test can hand them a deterministic fake and check
the verdicts built on them exactly, whatever else the machine is running.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from ..core.decision import band_verdict
from ..core.device import allocated_bytes, synchronize

L2_FLUSH_BYTES = 256 * 2**20  # larger than any current GPU's L2 cache
HOST_HIDING_CYCLES = 2 * 10**6  # ≈ 1 ms of GPU spin: longer than the host takes to launch one kernel call


@dataclass(frozen=True)
class Timing:
    """Summary of per-call times in milliseconds."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int

    @classmethod
    def from_samples(cls, samples_ms: np.ndarray) -> Timing:
        p20, median, p80 = np.quantile(samples_ms, [0.2, 0.5, 0.8])
        return cls(float(median), float(p20), float(p80), len(samples_ms))

    def as_record(self) -> dict:
        """The record fields of a results table: median_ms, p20_ms, p80_ms, reps."""
        return {"median_ms": self.median_ms, "p20_ms": self.p20_ms, "p80_ms": self.p80_ms, "reps": self.reps}


@dataclass(frozen=True)
class Comparison:
    """Speedup of a candidate over a baseline from interleaved runs: baseline time / candidate time, per round.

    The speedup is the median of the per-round ratios and its band their p20–p80, so the speedup lies inside its
    band by construction (a ratio of the two medians need not: a few rounds at another clock can put it outside).
    """

    speedup: float  # median of the per-round ratios baseline / candidate
    p20: float  # quantiles of the per-round ratios: the noise spread
    p80: float
    verdict: str  # "faster", "slower" or "within noise"

    @classmethod
    def from_samples(cls, baseline_ms: np.ndarray, candidate_ms: np.ndarray) -> Comparison:
        ratios = baseline_ms / candidate_ms  # one ratio per interleaved round
        p20, median, p80 = np.quantile(ratios, [0.2, 0.5, 0.8])
        return cls(float(median), float(p20), float(p80), band_verdict(p20, p80))

    def as_record(self,
                  names: tuple[str, str, str, str] = ("speedup", "speedup_p20", "speedup_p80", "verdict")) -> dict:
        """The record fields of a results table, under `names` for (speedup, p20, p80, verdict)."""
        return dict(zip(names, (self.speedup, self.p20, self.p80, self.verdict)))


VERSUS = ("vs_speedup", "vs_p20", "vs_p80", "vs_verdict")  # `as_record` names for a comparison with `against`

HostClock = Callable[[], float]  # seconds on the host, monotonic: `host_clock` or a test's fake


def host_clock() -> float:
    """The host's clock in seconds, which CPU timing reads unless given another `clock`."""
    return time.perf_counter()


class _Clock:
    """Brackets one call with CUDA events (after an L2 flush) or with `clock` (`host_clock` by default) on the CPU."""

    def __init__(self, device: torch.device, clock: HostClock | None = None):
        self.device = device
        self.clock = host_clock if clock is None else clock  # looked up here, so replacing `host_clock` reaches it
        self.flush = (torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device=device)
                      if device.type == "cuda" else None)

    def time(self, fn: Callable[[], object], idle_start: bool = False, lead_in: bool = False,
             host_hidden: bool = False) -> Callable[[], float]:
        """Run `fn` once; return a thunk that yields its time in ms (after a sync, for CUDA).

        With `idle_start`, the GPU has finished all earlier work when `fn` starts, so time the GPU
        spends waiting for `fn`'s own launches counts; without, work still queued (the flush, at least)
        lets the host run ahead and hides up to that much launch overhead. With `lead_in`, `fn` runs
        once untimed just before the timed run (after the idle sync, if any): the timed run then starts
        in steady state, its host side overlapping the lead-in's GPU work as in a model's next layer.
        With `host_hidden`, the GPU spins (`HOST_HIDING_CYCLES`) before the flush, so `fn` is launched
        before the GPU gets to it however long its launch takes: the time is the GPU's alone.
        """
        if self.flush is None:
            if lead_in:
                fn()
            start = self.clock()
            fn()
            elapsed = (self.clock() - start) * 1e3
            return lambda: elapsed
        if host_hidden:
            torch.cuda._sleep(HOST_HIDING_CYCLES)
        self.flush.zero_()
        if idle_start:
            synchronize(self.device)
        if lead_in:
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        return lambda: start.elapsed_time(end)


MIN_REPS, MAX_REPS, WARMUP = 10, 200, 3  # rounds at least and at most, warm-up calls of each callable


def round_count(budget_s: float, per_round_s: float, min_reps: int = MIN_REPS, max_reps: int = MAX_REPS) -> int:
    """The rounds that fit `budget_s` when one round takes `per_round_s`, within [min_reps, max_reps]."""
    return int(min(max_reps, max(min_reps, budget_s / max(per_round_s, 1e-6))))


def time_interleaved(fns: dict[str, Callable[[], object]], device: torch.device, budget_s: float = 1.0,
                     min_reps: int = MIN_REPS, max_reps: int = MAX_REPS, warmup: int = WARMUP,
                     idle_start: bool = False, lead_in: bool | set[str] = False, host_hidden: bool = False,
                     seed: int = 0, clock: HostClock | None = None) -> dict[str, np.ndarray]:
    """Time each callable once per round, interleaved, and return per-call ms for each.

    Each round runs every callable once, in a fresh (seeded) random order, so no callable always
    follows the same neighbour (what runs just before a call can shift its time by a percent or more).
    Each function is warmed up first; the number of rounds fits `budget_s` of total run time,
    within [min_reps, max_reps]. `idle_start`, `lead_in`, `host_hidden`: see `_Clock.time`; `lead_in` may name
    the callables that get one (a set), or give one to all (True). `clock`: the CPU's clock (see `_Clock`).
    """
    timer = _Clock(device, clock)
    estimate = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        synchronize(device)
        thunks = [timer.time(fn, host_hidden=host_hidden) for _ in range(2)]
        synchronize(device)
        estimate[name] = min(t() for t in thunks)
    leads = set(fns) if lead_in is True else set(lead_in or ())
    per_round_s = sum(ms * (2 if name in leads else 1) for name, ms in estimate.items()) / 1e3
    reps = round_count(budget_s, per_round_s, min_reps, max_reps)
    thunks: dict[str, list] = {name: [] for name in fns}
    rng = np.random.default_rng(seed)
    names = list(fns)
    for _ in range(reps):
        for i in rng.permutation(len(names)):
            thunks[names[i]].append(timer.time(fns[names[i]], idle_start, names[i] in leads, host_hidden))
    synchronize(device)
    return {name: np.array([t() for t in ts]) for name, ts in thunks.items()}


SPIN_UP_CYCLES = 4 * 10**8  # a GPU spin of 0.2 s at 2 GHz (longer while the clock is still low) before timing
CALLS_PER_SAMPLE = 8  # back-to-back layer calls in one timing sample, as the layers of a model run
WAITS_ON_HOST = 0.5  # a call whose kernels fill less than this share of it mostly waits for the host
HOST_SENSITIVE = 0.9  # kernels filling less than this share of a call: host time in it, which moves with the
# host's speed between cells; above it, the call and the GPU timing differ by no more than they do anyway
LONG_CALL_MS = 20.0  # a call at least this long hides its own launch overhead: one call per sample
PROTOCOL = ("A layer call's time is the median, over interleaved rounds, of samples of 8 calls back to back in "
            "steady state (the GPU spun up to its working clock first; an untimed sample leads in from an idle "
            "GPU; calls of 20 ms or more are timed one at a time), divided by 8: what one layer costs inside a "
            "model.")


def _calls(fn: Callable[[], object], n: int) -> None:
    for _ in range(n):
        fn()


def spin_up(device: torch.device, cycles: int = SPIN_UP_CYCLES) -> None:
    """Keep the GPU busy for `cycles` of its clock, so that timing starts at the clock it runs a model at: an
    idle GPU clocks down, and launch-bound layers alone keep it too lightly loaded to clock back up for
    seconds. Nothing to do on the CPU."""
    if device.type == "cuda":
        torch.cuda._sleep(cycles)
        synchronize(device)


def time_layer_calls(fns: dict[str, Callable[[], object]], device: torch.device, budget_s: float = 1.0,
                     warm_clock: bool = True, clock: HostClock | None = None, **kwargs) -> dict[str, np.ndarray]:
    """Per-call ms of each layer call in `fns`, interleaved, under the project's one protocol (`PROTOCOL`).

    Every table that times a layer (the sweep, `fastest`'s choice, the keep-or-revert experiment, long
    context, the notebooks) goes through here, so the same layer gets the same number everywhere. A sample
    is CALLS_PER_SAMPLE calls back to back from an idle GPU after an untimed lead-in sample, so the timed
    calls run in steady state: a call is charged for its host (Python, launch) time where that outlasts
    its kernels, and not for the start-up only a model's first layer pays. A layer whose call takes
    LONG_CALL_MS or more is timed one call at a time, without a lead-in: its kernels hide the host, and
    repeating it would only lengthen the run; the choice is per layer, so one slow layer in the mix (the
    naive reference) changes nothing for the others. With `warm_clock` the GPU is first spun up to its
    working clock (`spin_up`). `clock`: the CPU's clock (see `_Clock`). `kwargs` go to `time_interleaved`.
    """
    if warm_clock:
        spin_up(device)
    for fn in fns.values():  # one call each, so the estimate below sees no first-call work
        fn()
    synchronize(device)
    timer = _Clock(device, clock)
    thunks = {name: timer.time(fn) for name, fn in fns.items()}
    synchronize(device)
    long = {name for name, t in thunks.items() if t() >= LONG_CALL_MS}
    batched = {name: fn if name in long else partial(_calls, fn, CALLS_PER_SAMPLE) for name, fn in fns.items()}
    samples = time_interleaved(batched, device, budget_s=budget_s, idle_start=True, lead_in=set(fns) - long,
                               clock=clock, **kwargs)
    return {name: ms if name in long else ms / CALLS_PER_SAMPLE for name, ms in samples.items()}


def cold_call_ms(fn: Callable[[], object], device: torch.device, calls: int = 3,
                 clock: HostClock | None = None) -> float:
    """The median of `calls` single calls, each from an idle GPU with the L2 cache flushed: the latency of a
    layer called on its own, host start included (the second number beside `time_layer_calls`'s)."""
    thunks = [_Clock(device, clock).time(fn, idle_start=True) for _ in range(calls)]
    synchronize(device)
    return float(np.median([t() for t in thunks]))


def gpu_call_ms(fn: Callable[[], object], device: torch.device, calls: int = CALLS_PER_SAMPLE,
                samples: int = 3) -> float:
    """GPU ms of one call with the host out of the way (NaN on the CPU): `calls` calls queued behind a sleep
    kernel long enough for the host to launch them all, then run back to back, timed with CUDA events.

    Beside `time_layer_calls`'s number this splits a call into the GPU's share (this) and the host's (the
    rest: the GPU waiting for Python and launches). A call that waits on the GPU itself (a sync inside)
    cannot be queued ahead, and then this is an upper bound that still includes the host.
    """
    if device.type != "cuda":
        return float("nan")
    fn()
    synchronize(device)
    start = time.perf_counter()
    _calls(fn, calls)
    synchronize(device)
    host_ms = (time.perf_counter() - start) * 1e3  # at least the host's time to launch `calls` calls
    cycles = int(max(host_ms, 1.0) * 4e6)  # ≥ 2 × host_ms at any clock up to 2 GHz
    per_call = []
    for _ in range(samples):
        start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(cycles)
        start_event.record()
        _calls(fn, calls)
        end_event.record()
        synchronize(device)
        per_call.append(start_event.elapsed_time(end_event) / calls)
    return float(np.median(per_call))


def benchmark(fn: Callable[[], object], device: torch.device, **kwargs) -> Timing:
    """Timing of one callable (see `time_interleaved` for the options)."""
    return Timing.from_samples(time_interleaved({"fn": fn}, device, **kwargs)["fn"])


def compare(baseline: Callable[[], object], candidate: Callable[[], object], device: torch.device,
            **kwargs) -> Comparison:
    """Interleaved A/B timing of two callables, with the speedup of `candidate` and its verdict."""
    samples = time_interleaved({"baseline": baseline, "candidate": candidate}, device, **kwargs)
    return Comparison.from_samples(samples["baseline"], samples["candidate"])


def peak_memory(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """Run `fn` once; return (peak allocated bytes, peak bytes above what was live before). NaN on the CPU."""
    if device.type != "cuda":
        fn()
        return float("nan"), float("nan")
    synchronize(device)
    before = allocated_bytes(device)
    torch.cuda.reset_peak_memory_stats(device)
    out = fn()
    synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    del out
    return float(peak), float(peak - before)
