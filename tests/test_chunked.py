"""The chunked layer: exact against the reference in float64 for any chunk size and padding, the chunk
attention strategies and their self-check (a top-left causal mask must fail), sampled-row verification,
the long-context runner and the memory-cap options."""
import functools
import math

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import roofline_lib.core.correctness as correctness
import roofline_lib.core.reference as reference
from roofline_lib import Shape
from roofline_lib.cli import main
from roofline_lib.cli.parser import build_parser
from roofline_lib.core.correctness import Case
from roofline_lib.core.outcome import VariantUnavailable
from roofline_lib.core.shapes import ALL_ROWS
from roofline_lib.core.truth import float64_truth, sample_rows
from roofline_lib.runs.longctx import grid_strategies, long_shape, measure_layer, run_longctx, timing_options
from roofline_lib.runs.pipeline import check_variant
from roofline_lib.runs.sweep import run_sweep
from roofline_lib.variants.chunk_attention import (
    STRATEGIES,
    SplitMerge,
    Strategy,
    attend_math,
    merge,
    self_check,
    self_check_problem,
)
from roofline_lib.variants.chunked import ChunkedLayer
from roofline_lib.variants.registry import build_variant

SHAPE = Shape("c1", 3, 37, 48, 4)  # odd batch, prime seq_len, head_dim 12
CPU_STRATEGIES = ["split_math", "lower_right", "mask"]


@functools.lru_cache(maxsize=None)
def fp64_case(padding: str) -> Case:
    return Case(SHAPE, torch.float64, torch.device("cpu"), padding, seed=5)


@pytest.mark.parametrize("attention", CPU_STRATEGIES)
@pytest.mark.parametrize("padding", ["none", "left", "holes"])
@pytest.mark.parametrize("chunk_size", [1, 5, 16, 37, 64])  # 1, non-dividing, dividing-ish, = N, > N
def test_chunked_is_exact_in_float64(padding, chunk_size, attention):
    case = fp64_case(padding)
    result = check_variant(case, "chunked", chunk_size=chunk_size, attention=attention)
    assert result.passed and result.err < 1e-13, result.reason


def test_chunked_matches_sampled_float64_truth(cpu):
    """The §3 path used at 100,000+ tokens: truth only on sampled rows, first and last included."""
    B, N, C, H = 2, 700, 32, 2
    layer = correctness.random_reference(Shape("l", B, N, C, H), 3, torch.float64, cpu)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(B, N, C, generator=gen, dtype=torch.float64)
    mask = torch.arange(N)[None, :] >= torch.tensor([[0], [250]])  # (B, N): batch 1 left-padded past 2 chunks
    mask[0, 300:340] = False  # a hole in batch 0
    rows = sample_rows(N)
    assert len(rows) == 64 and rows[0] == 0 and rows[-1] == N - 1
    for kpm in (None, mask):
        truth = float64_truth(layer, x, kpm, rows)  # (B, 64, C)
        out = build_variant("chunked", layer, chunk_size=96)(x, kpm)[:, rows]
        valid = torch.ones(B, len(rows), dtype=torch.bool) if kpm is None else kpm[:, rows]
        assert (out - truth)[valid].abs().max() < 1e-12


class TopLeft:
    """A wrong chunk attention: SDPA's is_causal, which aligns top-left when L < S."""

    def __call__(self, q, k, v, q_offset, key_padding_mask=None):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def log2_lse_kernel(q, k, v, mask=None, is_causal=False):
    """A wrong kernel for the merge: log-sum-exp in base 2 instead of e."""
    out, lse = attend_math(q, k, v, mask, is_causal)
    return out, lse / math.log(2)


@pytest.fixture
def wrong_strategies(monkeypatch):
    monkeypatch.setitem(STRATEGIES, "top_left", Strategy(TopLeft(), takes_padding=False, needs_cuda=False))
    monkeypatch.setitem(STRATEGIES, "log2_merge", Strategy(SplitMerge(log2_lse_kernel), True, False))
    self_check.cache_clear()
    yield
    self_check.cache_clear()


@pytest.mark.parametrize("name", ["top_left", "log2_merge"])
def test_self_check_rejects_wrong_attention(cpu, wrong_strategies, name):
    reason = self_check(name, cpu, torch.float64, 12)
    assert reason is not None and "disagrees" in reason
    with pytest.raises(VariantUnavailable, match="disagrees"):
        build_variant("chunked", fp64_case("none").layer, chunk_size=8, attention=name)


@pytest.mark.parametrize("name", ["top_left", "log2_merge"])
def test_wrong_attention_fails_verification(wrong_strategies, name):
    """Bypassing the self-check, §3 itself catches the wrong alignment or merge."""
    case = fp64_case("none")
    layer = ChunkedLayer(case.layer, chunk_size=8, attention="split_math")
    layer.attention_name = name
    result = case.check_module("chunked_wrong", layer)
    assert not result.passed and "exceeds" in result.reason


def test_top_left_is_right_when_one_chunk_covers_the_sequence(wrong_strategies):
    """Only with L < S does the alignment matter: a single chunk is the square case."""
    case = fp64_case("none")
    layer = ChunkedLayer(case.layer, chunk_size=64, attention="split_math")
    layer.attention_name = "top_left"
    assert case.check_module("one_chunk", layer).passed


def test_merge_is_exact(cpu):
    q, k, v, _ = self_check_problem(8, torch.float64, cpu, q_offset=50, padded=False)
    whole, lse = attend_math(q, k, v)
    o1, l1 = attend_math(q, k[:, :, :30], v[:, :, :30])
    o2, l2 = attend_math(q, k[:, :, 30:], v[:, :, 30:])
    torch.testing.assert_close(merge(o1, l1, o2, l2), whole, rtol=0, atol=1e-14)
    torch.testing.assert_close(torch.logaddexp(l1, l2), lse, rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", CPU_STRATEGIES)
@pytest.mark.parametrize("padded", [False, True])
def test_cpu_strategies_pass_self_check(cpu, name, padded):
    reason = self_check(name, cpu, torch.float32, 16, padded)
    assert reason is None or (padded and not STRATEGIES[name].takes_padding)


def test_bad_options_and_unavailable_kernels(cpu):
    layer = fp64_case("none").layer
    for bad in (0, -3, 2.5, True, "8"):
        with pytest.raises(ValueError, match="chunk_size"):
            build_variant("chunked", layer, chunk_size=bad)
    with pytest.raises(ValueError, match="unknown attention 'nope'"):
        build_variant("chunked", layer, attention="nope")
    with pytest.raises(VariantUnavailable, match="needs a CUDA GPU"):
        build_variant("chunked", layer, attention="split_cudnn")
    padded_fallback = build_variant("chunked", layer, attention="lower_right")
    assert padded_fallback.attention_name == "lower_right" and padded_fallback.padded_attention_name == "split_math"
    assert any("takes no key_padding_mask" in n for n in padded_fallback.attention_notes)


def test_case_on_sampled_rows_with_proxy_bound(cpu, monkeypatch):
    """Where the reference is infeasible, Case checks sampled rows against the proxy row's bound."""
    shape = Shape("long", 1, 600, 32, 2)
    proxy = Shape("p", 2, 64, 32, 2)
    for module in (correctness, reference):
        monkeypatch.setattr(module, "reference_fits", lambda s, d, dev: s.seq_len <= 64)
    monkeypatch.setattr(correctness, "SUITE", (proxy,))
    correctness.proxy_reference_error.cache_clear()
    try:
        case = Case(shape, torch.float32, cpu, "holes", seed=2)
        assert not case.reference_feasible and case.truth.shape == (1, 64, 32)
        result = check_variant(case, "chunked", chunk_size=128)
        assert result.passed and result.rows_checked == 64, result.reason
    finally:
        correctness.proxy_reference_error.cache_clear()


def test_sweep_passes_chunk_size(cpu):
    df = run_sweep([SHAPE], ["no_empty_mask", "chunked"], torch.float32, cpu, padding="left",
                   options={"chunked": {"chunk_size": 7}}, budget_s=0.0, show_progress=False)
    assert set(df.status) == {"ok"} and df.passed.all()


def test_longctx_runner_on_cpu(cpu):
    shape = long_shape(200, batch=1, d_model=32, n_heads=2)
    df = run_longctx(shape, torch.float32, cpu, [64, 300], ["split_math", "mask"], reps=2, show_progress=False)
    measures, comparison = df[df.kind == "measure"], df[df.kind == "comparison"]
    assert len(measures) == 1 + 4 and set(measures.status) == {"ok"} and measures.passed.all()
    assert (measures.rows_checked == 200).all() and (measures.reps == 2).all() and (measures.tflops > 0).all()
    assert list(measures.variant) == ["no_empty_mask"] + ["chunked"] * 4
    assert len(comparison) == 1 and comparison.ratio_vs_full.iloc[0] > 0
    best = measures[measures.variant == "chunked"].median_ms.min()
    assert comparison.chunk_size.iloc[0] in (64, 300) and best > 0
    for col in ("device", "torch", "triton", "dtype", "date", "peak_gib", "first_call_s"):
        assert col in df.columns
    with pytest.raises(ValueError, match="memory cap needs a CUDA device"):
        run_longctx(shape, torch.float32, cpu, [64], ["mask"], memory_cap_gib=16)


def test_out_of_memory_is_reported_not_raised(cpu):
    def explodes(x, key_padding_mask=None):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 25.00 GiB")

    record = measure_layer(fp64_case("none"), "explodes", explodes, {"chunk_size": 8}, timing_options(1.0, None))
    assert record["status"] == "oom" and "25.00 GiB" in record["reason"] and record["chunk_size"] == 8


def test_option_parsing():
    args = build_parser().parse_args(["run", "--memory-cap-gib", "16", "--chunk-size", "512"])
    assert args.memory_cap_gib == 16.0 and args.chunk_size == 512
    args = build_parser().parse_args(["longctx", "--seq-len", "1000000", "--chunk-sizes", "8192",
                                      "--attention", "auto", "--memory-cap-gib", "16", "--reps", "3"])
    assert (args.seq_len, args.chunk_sizes, args.attention, args.memory_cap_gib, args.reps) == (
        1_000_000, [8192], "auto", 16.0, 3)
    assert grid_strategies("all", torch.device("cpu")) == CPU_STRATEGIES
    assert "split_math" not in grid_strategies("all", torch.device("cuda"))
    with pytest.raises(ValueError, match="unknown attention"):
        grid_strategies("split_cudnn,bogus", torch.device("cpu"))
    assert timing_options(1.0, 3) == {"budget_s": 0.0, "min_reps": 3, "max_reps": 3, "warmup": 0}


@pytest.mark.parametrize("command", ["run", "longctx"])
def test_memory_cap_needs_a_gpu(capsys, command):
    assert main([command, "--device", "cpu", "--memory-cap-gib", "16"]) == 2
    assert "memory cap needs a CUDA device" in capsys.readouterr().err


def test_cli_longctx_writes_csv(tmp_path, capsys):
    rc = main(["longctx", "--device", "cpu", "--seq-len", "150", "--d-model", "32", "--n-heads", "2",
               "--chunk-sizes", "40,64", "--attention", "auto", "--reps", "2", "--out", str(tmp_path)])
    assert rc == 0
    (csv,) = tmp_path.glob("longctx_*_fp32_*_N150.csv")
    df = pd.read_csv(csv)
    assert set(df.kind) == {"measure", "comparison"} and (df.resolved_attention.dropna() == "split_math").all()
    assert "ratio_vs_full" in capsys.readouterr().out




@pytest.mark.gpu
@pytest.mark.parametrize("padding", ["none", "left", "holes"])
@pytest.mark.parametrize("row,chunk_size", [("6", 300), ("12", 1000), ("12", 4096)])
def test_chunked_passes_on_gpu(row, chunk_size, padding):
    case = Case(ALL_ROWS[row], torch.float16, torch.device("cuda"), padding)
    result = check_variant(case, "chunked", chunk_size=chunk_size)
    assert result.passed, result.reason


@pytest.mark.gpu
@pytest.mark.parametrize("padding", ["none", "holes"])
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_gpu_strategy_that_passes_its_self_check_passes_verification(name, padding):
    device = torch.device("cuda")
    reason = self_check(name, device, torch.float16, ALL_ROWS["6"].head_dim, padding != "none")
    if reason is not None:
        pytest.skip(reason)
    case = Case(ALL_ROWS["6"], torch.float16, device, padding)
    layer = build_variant("chunked", case.layer, chunk_size=300, attention=name)
    assert name == (layer.attention_name if padding == "none" else layer.padded_attention_name)
    result = case.check_module("chunked", layer)
    assert result.passed, result.reason


@pytest.mark.gpu
def test_chunked_memory_does_not_grow_with_n_squared():
    from roofline_lib.measure.timing import peak_memory
    device = torch.device("cuda")
    B, N, C, H = 1, 65536, 1024, 16
    layer = correctness.random_reference(Shape("m", B, N, C, H), 0, torch.float16, device)
    x = torch.randn(B, N, C, device=device, dtype=torch.float16)
    chunked = build_variant("chunked", layer, chunk_size=4096)
    _, extra = peak_memory(lambda: chunked(x), device)
    cache_and_output = 3 * B * N * C * 2  # (B, N, 2C) keys/values and (B, N, C) output, fp16
    chunk_masks = 8 * B * 4096 * N  # at most a few (B, 1, L, N) masks, for the "mask" strategy
    assert extra < cache_and_output + chunk_masks  # full scores would be B·H·N²·2 bytes = 128 GiB


@pytest.mark.slow
def test_memory_against_n_estimates_every_layer_and_times_what_fits(cpu, monkeypatch):
    import roofline_lib.runs.longctx as longctx
    from roofline_lib.present.plots_longctx import plot_memory_against_n
    memory = longctx.memory_against_n([64, 512], torch.float32, cpu, d_model=32, n_heads=2, chunk_size=32,
                                      budget_s=0.0, show_progress=False)
    assert memory.layer.tolist() == list(longctx.MEMORY_LAYERS) * 2 and set(memory.status) == {"ok"}
    naive = memory[memory.layer == "reference"].estimated_gib.to_numpy()
    full = memory[memory.layer == "no_empty_mask"].estimated_gib.to_numpy()
    assert naive[1] / naive[0] > 2 * full[1] / full[0] > 2  # N² against N
    assert memory.median_ms.notna().all() and plot_memory_against_n(memory).axes
    monkeypatch.setattr(longctx, "memory_capacity", lambda device: 2**10)  # a 1 KiB card: nothing fits
    small = longctx.memory_against_n([256], torch.float32, cpu, d_model=32, n_heads=2, show_progress=False)
    assert set(small.status) == {"skipped"} and not small.fits.any()


def test_a_long_run_without_baseline_times_only_the_chunked_layer(cpu):
    from roofline_lib.runs.longctx import FULL, long_shape, run_longctx
    results = run_longctx(long_shape(96, d_model=32, n_heads=2), torch.float32, cpu, [32], ["auto"], reps=1,
                          baseline=False, show_progress=False)
    assert FULL not in set(results.variant) and set(results.kind) == {"measure"}
    assert results.status.eq("ok").all() and (results.err_ratio <= 2).all()


def test_a_full_layer_that_does_not_fit_is_not_compared(cpu, monkeypatch):
    """At 1M tokens on a T4 the full layer runs out of memory: the chunked layer is still measured, and no
    comparison is attempted against a layer that never ran."""
    import roofline_lib.runs.longctx as longctx
    real = longctx.measure_layer

    def full_does_not_fit(case, name, module, label, timing):
        if name == longctx.FULL:
            return {"kind": "measure", "variant": name, **label, "status": "oom", "reason": "out of memory: test"}
        return real(case, name, module, label, timing)

    monkeypatch.setattr(longctx, "measure_layer", full_does_not_fit)
    results = longctx.run_longctx(longctx.long_shape(96, d_model=32, n_heads=2), torch.float32, cpu, [32], ["auto"],
                                  reps=1, show_progress=False)
    assert results.kind.tolist() == ["measure", "measure"] and results.status.tolist() == ["oom", "ok"]


def test_the_long_context_summary_leaves_out_what_was_not_measured():
    from roofline_lib.present.report import longctx_markdown
    base = {"kind": "chunked", "variant": "chunked", "attention": "auto", "resolved_attention": "sdpa",
            "memory_cap_gib": math.nan, "status": "ok", "err_ratio": 1.0, "first_call_s": 0.1, "tflops": 0.1,
            "peak_gib": math.nan, "peak_extra_gib": math.nan, "ratio_vs_full": math.nan, "ratio_p20": math.nan,
            "ratio_p80": math.nan, "verdict": ""}
    results = pd.DataFrame([base | {"chunk_size": 512, "median_ms": 2.0},
                            base | {"chunk_size": 1024, "status": "oom", "err_ratio": math.nan, "median_ms": math.nan}])
    table = longctx_markdown(results)
    assert "peak_gib" not in table and "ratio_vs_full" not in table and "nan" not in table  # a CPU: no memory
    assert "—" in table.splitlines()[-1] and "—" not in table.splitlines()[-2]  # only the row that ran out of memory


def test_the_long_context_verdict_is_read_from_the_band_it_prints(monkeypatch):
    """Few rounds: a verdict from the inverted rounds' own quantiles can call 'faster' a band that holds 1."""
    import numpy as np

    import roofline_lib.runs.longctx as longctx
    rounds = {"full": np.ones(5), "chunked": np.array([0.5, 0.6, 0.7, 0.9, 1.5])}
    monkeypatch.setattr(longctx, "time_modules", lambda case, modules, **timing: (rounds, None))
    record = longctx.compare_to_full(None, None, None, {}, {})
    assert record["ratio_p20"] < 1 < record["ratio_p80"] and record["verdict"] == "within noise"
    rounds["chunked"] = np.array([0.5, 0.6, 0.7, 0.8, 0.9])
    assert longctx.compare_to_full(None, None, None, {}, {})["verdict"] == "faster"


@pytest.mark.parametrize("auto_last", [False, True], ids=["auto-first", "auto-last"])
def test_a_strategy_that_auto_already_ran_at_a_chunk_size_is_not_measured_twice(cpu, auto_last):
    from roofline_lib.variants.chunk_attention import STRATEGIES
    shape = long_shape(200, batch=1, d_model=32, n_heads=2)
    explicit = [name for name, s in STRATEGIES.items() if not s.needs_cuda and name != "auto"]
    strategies = [*explicit, "auto"] if auto_last else ["auto", *explicit]  # auto runs first either way
    df = run_longctx(shape, torch.float32, cpu, [64], strategies, reps=1, show_progress=False, baseline=False)
    chunked = df[(df.kind == "measure") & (df.variant == "chunked")].set_index("attention")
    ran = chunked.loc["auto", "resolved_attention"]
    assert chunked.loc[ran, "status"] == "skipped" and chunked.loc[ran, "reason"] == (
        f"the same configuration as auto → {ran}, measured above")
    assert (chunked.drop(index=ran).status == "ok").all()  # every other strategy measured once
    from roofline_lib.present.prose import longctx_headline
    assert f"passes §3 in {len(explicit)} of {len(explicit)} configurations" in longctx_headline(df)  # not a failure
