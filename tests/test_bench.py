"""The benchmark harness on CPU: its structure and its verdict logic, never its speed. Times that a verdict
rests on come from a fake clock (conftest's `FakeClock`), so no verdict depends on how busy the machine is."""
import numpy as np
import pytest
import torch
from conftest import FakeClock

from roofline_lib.measure.timing import (
    CALLS_PER_SAMPLE,
    LONG_CALL_MS,
    Comparison,
    Timing,
    benchmark,
    compare,
    peak_memory,
    round_count,
    time_interleaved,
    time_layer_calls,
)


def test_interleaved_samples_structure(cpu):
    order = []
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    samples = time_interleaved(fns, cpu, budget_s=0.0, min_reps=7, max_reps=7, warmup=2)
    assert set(samples) == {"a", "b"} and all(len(s) == 7 for s in samples.values())
    assert all((s >= 0).all() for s in samples.values())
    rounds = [order[i:i + 2] for i in range(len(order) - 14, len(order), 2)]
    assert all(sorted(r) == ["a", "b"] for r in rounds)  # interleaved: each round runs each once
    assert len({tuple(r) for r in rounds}) == 2  # in a shuffled order: a does not always go first


def test_lead_in_runs_each_timed_call_once_before_it(cpu):
    calls = []
    samples = time_interleaved({"a": lambda: calls.append("a")}, cpu, budget_s=0.0, min_reps=4, max_reps=4,
                               warmup=1, lead_in=True)
    assert len(samples["a"]) == 4 and len(calls) == 1 + 2 + 2 * 4  # warm-up, two estimates, lead-in + timed


def test_timing_quantiles():
    t = Timing.from_samples(np.arange(1.0, 102.0))
    assert (t.p20_ms, t.median_ms, t.p80_ms, t.reps) == (21.0, 51.0, 81.0, 101)


@pytest.mark.parametrize("candidate, verdict", [(np.full(50, 1.0), "faster"), (np.full(50, 4.0), "slower")])
def test_comparison_verdicts(candidate, verdict):
    rng = np.random.default_rng(0)
    baseline = 2.0 + 0.05 * rng.standard_normal(50)
    cmp = Comparison.from_samples(baseline, candidate + 0.05 * rng.standard_normal(50))
    assert cmp.verdict == verdict
    assert cmp.p20 <= cmp.speedup * 1.1 and cmp.p80 >= cmp.speedup * 0.9


def test_a_speedup_is_the_median_of_the_per_round_ratios_inside_its_band():
    baseline, candidate = np.array([1.0, 1.0, 1.0, 3.0, 3.0]), np.array([0.5, 0.5, 2.0, 2.0, 2.0])
    cmp = Comparison.from_samples(baseline, candidate)  # per-round ratios 2, 2, 0.5, 1.5, 1.5
    assert (cmp.speedup, cmp.p20, cmp.p80) == pytest.approx((1.5, 1.3, 2.0))
    assert np.median(baseline) / np.median(candidate) == 0.5 < cmp.p20  # the ratio of the medians would lie outside


def test_same_thing_twice_is_within_noise():
    rng = np.random.default_rng(1)
    a, b = 1 + 0.1 * rng.random(200), 1 + 0.1 * rng.random(200)
    assert Comparison.from_samples(a, b).verdict == "within noise"


def test_benchmark_and_compare_run_on_cpu(cpu):
    x = torch.randn(64, 64)
    t = benchmark(lambda: x + 1, cpu, budget_s=0.01, min_reps=5, max_reps=5)
    assert t.reps == 5 and 0 < t.p20_ms <= t.median_ms <= t.p80_ms < float("inf")
    real = compare(lambda: x @ x, lambda: x + 1, cpu, budget_s=0.0, min_reps=5, max_reps=5)
    assert np.isfinite(real.speedup) and real.speedup > 0 and real.verdict in ("faster", "slower", "within noise")


def test_compare_gives_the_speedup_and_verdict_of_the_clock_it_reads(cpu):
    clock = FakeClock()
    slow, fast = (lambda: clock.sleep(0.002)), (lambda: clock.sleep(0.001))
    faster = compare(slow, fast, cpu, budget_s=0.0, min_reps=20, max_reps=20, clock=clock)
    assert (faster.speedup, faster.p20, faster.p80) == pytest.approx((2.0, 2.0, 2.0)) and faster.verdict == "faster"
    assert compare(fast, slow, cpu, budget_s=0.0, min_reps=5, max_reps=5, clock=clock).verdict == "slower"
    assert compare(fast, fast, cpu, budget_s=0.0, min_reps=5, max_reps=5, clock=clock).verdict == "within noise"
    t = benchmark(slow, cpu, budget_s=0.0, min_reps=5, max_reps=5, clock=clock)
    assert (t.p20_ms, t.median_ms, t.p80_ms) == pytest.approx((2.0, 2.0, 2.0))


def test_the_budget_sets_the_rounds_from_the_measured_call_time(cpu):
    clock = FakeClock()
    samples = time_interleaved({"f": lambda: clock.sleep(0.01)}, cpu, budget_s=0.2, min_reps=3, max_reps=100,
                               clock=clock)
    assert len(samples["f"]) == 20  # 0.2 s of 10 ms calls
    assert len(time_interleaved({"f": lambda: clock.sleep(0.01)}, cpu, budget_s=5.0, max_reps=30,
                                clock=clock)["f"]) == 30


def test_peak_memory_not_measured_on_cpu(cpu):
    peak, extra = peak_memory(lambda: torch.ones(10), cpu)
    assert np.isnan(peak) and np.isnan(extra)


@pytest.mark.gpu
def test_idle_start_charges_a_call_for_its_host_side_waits():
    import time
    device = torch.device("cuda")
    a = torch.zeros(1024, device=device)

    def host_bound():  # two tiny kernels with 2 ms of host work between them
        a.add_(1)
        time.sleep(0.002)
        a.add_(1)

    def long_kernel():
        return torch.empty(2**28, dtype=torch.uint8, device=device).zero_()

    samples = time_interleaved({"long": long_kernel, "host_bound": host_bound}, device, budget_s=0.0,
                               min_reps=5, max_reps=5, idle_start=True)
    assert np.median(samples["host_bound"]) >= 1.5


@pytest.mark.gpu
def test_host_hidden_timing_leaves_out_a_slow_launch():
    """A call whose host side takes 0.3 ms before its one tiny kernel (a slow launch): queued behind the spin,
    its time is the kernel's alone (on an H200 the flush alone hides only ≈ 65 µs of it)."""
    import time
    device = torch.device("cuda")
    a = torch.zeros(1024, device=device)

    def slow_launch():
        end = time.perf_counter() + 3e-4
        while time.perf_counter() < end:
            pass
        a.add_(1)

    samples = time_interleaved({"f": slow_launch}, device, budget_s=0.0, min_reps=5, max_reps=5, host_hidden=True)
    assert np.median(samples["f"]) < 0.1, samples["f"]


def test_layer_calls_are_timed_in_samples_of_back_to_back_calls(cpu):
    clock, calls = FakeClock(), []

    def call():
        calls.append(1)
        clock.sleep(0.001)

    samples = time_layer_calls({"a": call}, cpu, budget_s=0.0, min_reps=3, max_reps=3, warmup=0, clock=clock)
    assert samples["a"] == pytest.approx([1.0] * 3)  # per call: a sample's time divided by its calls
    # one priming call, one estimate, then time_interleaved's two estimate samples and 3 timed ones, each lead in
    assert len(calls) == 2 + CALLS_PER_SAMPLE * (2 + 3 * 2)


def test_long_layer_calls_are_timed_one_at_a_time(cpu):
    clock, calls = FakeClock(), {"slow": 0, "quick": 0}

    def sleeper(name, ms):
        def call():
            calls[name] += 1
            clock.sleep(ms / 1e3)
        return call

    fns = {"slow": sleeper("slow", 2 * LONG_CALL_MS), "quick": sleeper("quick", LONG_CALL_MS / 2)}
    samples = time_layer_calls(fns, cpu, budget_s=0.0, min_reps=2, max_reps=2, warmup=0, clock=clock)
    assert calls["slow"] == 2 + 2 + 2  # priming, estimate, two estimates, two timed calls: no lead-in, no batch
    assert calls["quick"] == 2 + CALLS_PER_SAMPLE * (2 + 2 * 2)  # the slow one in the mix changes nothing for it
    assert samples["slow"] == pytest.approx([2 * LONG_CALL_MS] * 2)
    assert samples["quick"] == pytest.approx([LONG_CALL_MS / 2] * 2)


def test_gpu_share_is_not_measured_on_cpu(cpu):
    from roofline_lib.measure.timing import gpu_call_ms
    assert np.isnan(gpu_call_ms(lambda: torch.ones(10), cpu))


@pytest.mark.gpu
def test_gpu_call_time_leaves_out_the_host_and_keeps_the_kernels():
    import time

    from roofline_lib.measure.timing import gpu_call_ms, time_layer_calls
    device = torch.device("cuda")
    a = torch.zeros(2**26, device=device)  # 256 MiB: each add_ is a kernel of tens of µs

    def host_bound():  # two kernels with 1 ms of host work between them
        a.add_(1)
        time.sleep(0.001)
        a.add_(1)

    call = float(np.median(time_layer_calls({"f": host_bound}, device, budget_s=0.0, min_reps=5, max_reps=5)["f"]))
    gpu = gpu_call_ms(host_bound, device)
    kernels = gpu_call_ms(lambda: a.add_(1), device) * 2
    assert call >= 1.0 and gpu < 0.5 * call, (call, gpu)
    assert 0.7 * kernels <= gpu <= 1.5 * kernels, (gpu, kernels)


def test_the_rounds_fit_the_budget_within_their_bounds():
    assert round_count(1.0, 0.01) == 100 and round_count(1.0, 0.5) == 10 and round_count(10.0, 0.001) == 200
    assert round_count(0.0, 0.0) == 10 and round_count(1.0, 0.1, min_reps=5, max_reps=8) == 8
