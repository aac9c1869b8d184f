"""The fastest rung (per-shape choice by measurement), CUDA-graph replay, and the torch.compile peers. Choices
by measurement run on a fake clock (conftest's `fake_clock`), so they are exact however busy the machine is."""
import numpy as np
import pandas as pd
import pytest
import torch

from roofline_lib import SMOKE_SUITE, Case, select_variants, verify
from roofline_lib.measure.timing import time_layer_calls
from roofline_lib.runs.pipeline import check_variant
from roofline_lib.variants.fastest import FastestLayer, pick
from roofline_lib.variants.graphed import CudaGraphLayer
from roofline_lib.variants.peers import PEERS
from roofline_lib.variants.sdpa import SdpaLayer, no_empty_mask


def test_the_registry_hands_fastest_the_one_protocol(cpu):
    from roofline_lib.variants.registry import build_variant
    assert build_variant("fastest", Case(SMOKE_SUITE[0], torch.float32, cpu).layer).timer is time_layer_calls


@pytest.mark.parametrize("padding", ["none", "left", "holes"])
def test_fastest_passes_on_cpu(cpu, padding):
    result = verify("fastest", SMOKE_SUITE[1], torch.float64, cpu, padding=padding)
    assert result.passed, result.reason


class Slow(SdpaLayer):
    """An SDPA layer that takes 5 ms more of a fake clock per call."""

    def __init__(self, ref, clock):
        super().__init__(ref, build_empty_mask=False)
        self.clock = clock

    def forward(self, x, key_padding_mask=None):
        self.clock.sleep(0.005)
        return super().forward(x, key_padding_mask)


def test_fastest_keeps_the_candidate_that_measures_fastest(cpu, fake_clock):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    layer = FastestLayer({"slow": Slow(case.layer, fake_clock), "quick": no_empty_mask(case.layer)},
                         time_layer_calls, budget_s=0.05)
    assert case.check_module("fastest", layer).passed
    assert layer.chosen == {(tuple(case.x.shape), True): "quick"}
    assert "→ quick" in layer.detail
    layer(case.x[:, :5])  # a new shape is measured on its own
    assert len(layer.chosen) == 2


def test_a_candidate_is_timed_only_on_shapes_within_its_token_limit(cpu, fake_clock):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    tokens = case.x.shape[0] * case.x.shape[1]
    layer = FastestLayer({"slow": Slow(case.layer, fake_clock), "quick": no_empty_mask(case.layer)},
                         time_layer_calls, budget_s=0.05, max_tokens={"quick": tokens - 1},
                         excluded={"gone": "a reason"})
    layer(case.x)
    assert layer.chosen == {(tuple(case.x.shape), True): "slow"}  # the only one that fits: chosen untimed
    layer(case.x[:, :1])
    assert layer.chosen[(tuple(case.x[:, :1].shape), True)] == "quick"
    assert "not timed here: gone (a reason)" in layer.detail
    assert layer.not_timed == "not timed here: gone (a reason)" and "not timed" not in layer.choices  # apart, so a
    assert layer.detail == f"{layer.choices}; {layer.not_timed}"  # table gives the choices per row, the rest once


def test_fastest_says_why_it_leaves_candidates_out(cpu):
    from roofline_lib.variants.fastest import CANDIDATES, fastest
    from roofline_lib.variants.whole_layer import NO_GPU, whole_layer_unavailable_reason
    layer = fastest(Case(SMOKE_SUITE[0], torch.float32, cpu).layer, time_layer_calls)
    assert list(layer.candidates) == ["no_empty_mask"] and set(layer.excluded) == set(CANDIDATES[1:])
    assert layer.detail == f"not timed here: {', '.join(CANDIDATES[1:])} ({NO_GPU})"
    assert whole_layer_unavailable_reason(cpu, torch.float16) == NO_GPU


class Broken(SdpaLayer):
    """Fails on inputs of fewer than `min_len` positions, and counts its calls."""

    def __init__(self, ref, min_len: int = 10**9):
        super().__init__(ref, build_empty_mask=False)
        self.min_len, self.calls = min_len, 0

    def forward(self, x, key_padding_mask=None):
        self.calls += 1
        if x.shape[1] < self.min_len:
            raise RuntimeError("out of resource: shared memory\nmore")
        return super().forward(x, key_padding_mask)


def test_a_candidate_that_fails_on_a_shape_is_left_out_of_that_shape_only(cpu):
    from roofline_lib.present.prose import _fastest_losses
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    n = case.x.shape[1]
    broken, twin = Broken(case.layer, min_len=n), Broken(case.layer)
    layer = FastestLayer({"quick": no_empty_mask(case.layer), "broken": broken, "graph_broken": twin},
                         time_layer_calls, budget_s=0.05, excluded=(given := {}))
    short = case.x[:, : n - 1]
    layer(short)
    key = (tuple(short.shape), True)
    assert layer.failed[key] == {"broken": "out of resource: shared memory", "graph_broken": "its eager layer failed"}
    assert twin.calls == 0 and given == {}  # the twin not even tried; the caller's dict untouched
    shape = "B{} N{} d{}".format(*short.shape)
    assert layer.detail.startswith(f"{shape} → quick, left out: broken (out of resource")
    assert layer.choice_on(short) == ("quick", "sdpa_pick")  # as data: what ran, not what was left out
    assert case.check_module("fastest", layer).passed  # the full length: `broken` runs there, and is timed
    assert layer.failed[(tuple(case.x.shape), True)] == {"graph_broken": "out of resource: shared memory"}
    assert broken.calls > 2 and twin.calls == 1  # timed there; its twin tried once, on the shape its eager ran
    sweep = pd.DataFrame({"row": ["1", "1"], "variant": ["fastest", "no_empty_mask"],
                          "chosen": [layer.choice_on(short)[0], ""], "median_ms": [2.0, 1.0], "speedup": [1.0, 2.0],
                          "speedup_p20": [0.9, 1.9], "speedup_p80": [1.1, 2.1], "passed": [True, True]})
    assert "(it ran quick)" in _fastest_losses(sweep)


def test_the_plain_candidates_failure_is_the_layers_own(cpu):
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    layer = FastestLayer({"broken": Broken(case.layer), "quick": no_empty_mask(case.layer)},
                         time_layer_calls, budget_s=0.05)
    with pytest.raises(RuntimeError, match="out of resource"):
        layer(case.x)


def test_a_graph_replay_is_picked_only_where_it_beats_its_eager_layer_beyond_noise():
    rng = np.random.default_rng(0)

    def noisy(ms):
        return ms * (1 + 0.02 * rng.standard_normal(40))

    within = np.array([0.9] * 5 + [0.95] + [1.1] * 4)  # per-round ratios to `a` straddle 1 …
    assert np.median(within) < 1 and pick({"a": np.ones(10), "graph_a": within, "b": np.full(10, 1.2)}) == "a"
    # … so the lower median is not enough: the eager layer is kept
    assert pick({"a": noisy(1.0), "graph_a": noisy(0.8), "b": noisy(1.2)}) == "graph_a"
    same_rounds = noisy(1.0)  # the machine's noise hits both alike (interleaved): 1 % lower every round
    assert pick({"a": same_rounds, "graph_a": same_rounds * 0.99, "b": noisy(1.2)}) == "graph_a"
    assert pick({"graph_a": noisy(1.0), "c": noisy(2.0)}) == "graph_a"  # no eager twin timed: the median decides
    with pytest.raises(ValueError, match="no candidate"):
        pick({})


def test_recorded_results_name_compile_best_by_its_name_now():
    from roofline_lib.core.recorded import recorded_results
    recorded = recorded_results("results/past_seed/run_nvidia-h200_fp16_2026-11-29.csv")
    assert "compile_kept" in set(recorded.variant) and "compile_best" not in set(recorded.variant)
    assert "compile_best" not in set(recorded.get("against", pd.Series(dtype=str)).dropna())


def test_peers_are_selectable_and_compile_the_kept_rung(cpu, monkeypatch):
    assert select_variants("reference,compile_reference,compile_kept") == [
        "reference", "compile_reference", "compile_kept"]
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda module, **kw: compiled.append((module, kw)) or module)
    case = Case(SMOKE_SUITE[0], torch.float32, cpu)
    for name in PEERS:
        if name == "compile_kept_reduce_overhead":
            continue  # CUDA graphs: a GPU's (tests/test_variants.py)
        assert check_variant(case, name).passed
    modes = [kw["mode"] for _, kw in compiled]
    assert modes == [None, "max-autotune", None]
    assert compiled[0][0] is case.layer and isinstance(compiled[2][0], SdpaLayer)


@pytest.mark.gpu
def test_cuda_graph_replays_new_inputs_exactly():
    case = Case(SMOKE_SUITE[2], torch.float16, torch.device("cuda"), padding="left")
    eager = no_empty_mask(case.layer)
    graphed = CudaGraphLayer(no_empty_mask(case.layer))
    for scale in (1.0, 0.5):  # second call replays with other values in the static buffers
        x = case.x * scale
        out = graphed(x, case.key_padding_mask)
        want = eager(x, case.key_padding_mask)
        valid = case.key_padding_mask
        torch.testing.assert_close(out[valid], want[valid], rtol=0, atol=0)
    first = graphed(case.x, case.key_padding_mask)
    graphed(case.x * 2, case.key_padding_mask)
    torch.testing.assert_close(first[valid], eager(case.x, case.key_padding_mask)[valid], rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fastest", "compile_reference", "compile_kept"])
def test_gpu_fastest_and_peers_pass(name):
    assert verify(name, SMOKE_SUITE[1], torch.float16, torch.device("cuda"), padding="holes").passed


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_fastest_times_the_whole_layer_kernel_on_few_tokens(dtype, monkeypatch):
    from roofline_lib import SUITE
    from roofline_lib.core.device import capability
    from roofline_lib.variants import whole_layer
    from roofline_lib.variants.fastest import fastest
    if capability(torch.device("cuda")) < whole_layer.MIN_CAPABILITY:
        pytest.skip("the whole-layer kernel is a candidate from compute capability 9.0 on")
    case = Case(SUITE[0], dtype, torch.device("cuda"), "holes")  # 128 tokens
    layer = fastest(case.layer, time_layer_calls, budget_s=0.1)
    assert {"whole_layer", "graph_whole_layer"} <= set(layer.candidates) and not layer.excluded
    for name in ("no_empty_mask", "whole_layer"):  # a graph replays its own eager layer: no second weight copy
        assert layer.candidates[f"graph_{name}"].layer is layer.candidates[name]
    result = case.check_module("fastest", layer)
    assert result.passed, result.reason
    assert not any(layer.failed.values()), layer.failed  # it ran, and was timed, on every shape checked
    monkeypatch.setattr(whole_layer, "capability", lambda device: (7, 5))  # as a T4
    assert "this GPU's is 7.5" in fastest(case.layer, time_layer_calls).excluded["whole_layer"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_graph_overhead_benchmark_says_it_needs_a_gpu(tmp_path, capsys):
    from benchmarks.graph_overhead import main
    assert main(["--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_graph_overhead_benchmark_times_every_piece(tmp_path):
    import pandas as pd

    from benchmarks.graph_overhead import main
    assert main(["--rows", "1", "--calls", "50", "--out", str(tmp_path)]) == 0
    results = pd.read_csv(next(tmp_path.glob("graph_overhead_*.csv")))
    assert list(results["piece"]) == ["residual_addmm(x), eager", "residual_addmm(x), graphed", "replay",
                                      "input copy", "output clone", "replay, GPU only"]
    assert (results["host_us"].dropna() > 0).all() and results["gpu_us"].dropna().gt(0).all()


def test_fastest_is_never_slower_than_its_own_candidates_in_a_sweep(cpu, monkeypatch, fake_clock):
    """`fastest` chooses under the sweep's own protocol, so the sweep never finds a candidate faster than it:
    on a clock that only the candidates' own time moves, it times exactly as its choice."""
    from roofline_lib import VARIANTS
    from roofline_lib.runs.sweep import run_sweep

    class Sleeps(torch.nn.Module):  # a layer whose cost is host time, as on launch-bound rows
        def __init__(self, layer, seconds):
            super().__init__()
            self.layer, self.seconds = layer, seconds
            self.d_model, self.ln1 = layer.d_model, layer.ln1

        def forward(self, x, key_padding_mask=None):
            fake_clock.sleep(self.seconds)
            return self.layer(x, key_padding_mask)

    candidates = {"quick": 0.004, "slow": 0.012}
    for name, seconds in candidates.items():
        monkeypatch.setitem(VARIANTS, name, lambda ref, s=seconds: Sleeps(no_empty_mask(ref), s))
    monkeypatch.setitem(VARIANTS, "chooser", lambda ref, timer: FastestLayer(  # the registry hands it the timer
        {name: VARIANTS[name](ref) for name in candidates}, timer, budget_s=0.05))
    df = run_sweep(SMOKE_SUITE[:1], ["chooser", *candidates], torch.float32, cpu, budget_s=0.2,
                   against="chooser", show_progress=False).set_index("variant")
    assert (df.status == "ok").all()
    shown = df[["median_ms", "vs_speedup", "vs_p20", "vs_p80", "vs_verdict"]]
    assert df.loc["quick", "vs_verdict"] == "within noise", shown
    assert df.loc["quick", "vs_speedup"] == pytest.approx(1.0), shown
    assert df.loc["slow", "vs_verdict"] == "slower" and df.loc["slow", "vs_speedup"] == pytest.approx(1 / 3), shown
