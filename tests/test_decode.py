"""Decode through a key/value cache computes the full-sequence layer's function (§3 on the stepped rows), refuses
bad input in one line, and its split-KV kernel merges its key ranges exactly."""
import dataclasses
import inspect

import pandas as pd
import pytest
import torch
from conftest import CUDA, DEVICE

from roofline_lib import SMOKE_SUITE, Shape
from roofline_lib.core.correctness import random_reference, section3_judgement
from roofline_lib.core.outcome import VariantUnavailable
from roofline_lib.kernels import unavailable_reason
from roofline_lib.measure.decode_roofline import decode_floor_us, decode_step_bytes, decode_step_flops
from roofline_lib.runs.decode import (
    check_decoder,
    checked_forms,
    decode_case,
    fastest_graphed,
    judge_decoder,
    run_decoder,
)
from roofline_lib.variants import decode
from roofline_lib.variants.decode import DECODERS, TRITON_DECODERS, build_decoder, layer_kernel_unavailable_reason
from roofline_lib.variants.decode_stack import DecodeStack

DTYPES = [torch.float16, torch.bfloat16] if CUDA else [torch.float32]
LAYER_KERNEL_REASON = layer_kernel_unavailable_reason(DEVICE, DTYPES[0])


def buildable_decoders(device: torch.device, dtype: torch.dtype) -> list[str]:
    """The decoders a test can build on `device` in `dtype`: the Triton ones where Triton runs there, the layer
    kernel where it does."""
    def reason(name: str) -> str | None:
        if name == "layer_kernel":
            return layer_kernel_unavailable_reason(device, dtype)
        return unavailable_reason(device, dtype) if name in TRITON_DECODERS else None
    return [name for name in DECODERS if reason(name) is None]


DEVICE_DECODERS = buildable_decoders(DEVICE, DTYPES[0])
HOST_DECODERS = buildable_decoders(torch.device("cpu"), torch.float32)  # on a GPU's machine: no Triton decoder


# the layer kernel's interpreted phases take seconds a case: its left-padded case stays quick, the other is slow
DECODER_CASES = [pytest.param(name, padding, marks=pytest.mark.slow) if (name, padding) == ("layer_kernel", "none")
                 else (name, padding) for name in DEVICE_DECODERS for padding in ("none", "left")]


@pytest.mark.parametrize(("name", "padding"), DECODER_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_decoder_passes_section_3_on_the_stepped_rows(name, padding, dtype):
    shape = SMOKE_SUITE[1]  # B 3, prime prompt length 37, head_dim 12
    record = check_decoder(name, shape, steps=5, dtype=dtype, device=DEVICE, padding=padding, seed=1)
    assert record["passed"], record["reason"]
    assert record["err"] == record["err"] and record["ref_err"] > 0


@pytest.mark.skipif(unavailable_reason(DEVICE) is not None, reason=str(unavailable_reason(DEVICE)))
@pytest.mark.parametrize("gemv", [True, False], ids=["gemv", "tiles"])
def test_the_fused_split_kv_step_of_one_sequence_passes_section_3_in_the_gemv_or_the_tiles(gemv, monkeypatch):
    """At B = 1 its four GEMMs run fused_linear's CUDA-core GEMV, or with gemv=False the tensor-core tiles."""
    from roofline_lib.kernels import fused_linear
    ran, real = [], fused_linear.gemv_linear
    monkeypatch.setattr(fused_linear, "gemv_linear", lambda *args: ran.append(args[5]) or real(*args))
    record = check_decoder("fused_split_kv", SMOKE_SUITE[0], steps=3, dtype=DTYPES[0], device=DEVICE, padding="none",
                           seed=1, gemv=gemv)
    assert record["passed"], record["reason"]
    assert bool(ran) == gemv and len(ran) % 4 == 0  # four GEMMs a step


def test_left_padding_really_pads_the_prompts_by_different_amounts():
    case = decode_case(SMOKE_SUITE[1], 4, torch.float32, torch.device("cpu"), "left", seed=1)
    prompt = case.key_padding_mask[:, :SMOKE_SUITE[1].seq_len]
    assert (~prompt).sum(1).unique().numel() > 1 and prompt[:, -1].all() and case.key_padding_mask[:, -4:].all()


def test_a_wrong_decoder_fails_section_3(monkeypatch):
    """The check can fail: a static cache that forgets the newest key."""
    monkeypatch.setattr(decode.KVCache, "append", lambda self, k, v: None)
    record = check_decoder("static_cache", SMOKE_SUITE[0], 3, torch.float32, torch.device("cpu"), "none")
    assert not record["passed"]


def test_judge_decoder_is_section_3_on_the_stepped_rows():
    shape = SMOKE_SUITE[0]
    case = decode_case(shape, 3, torch.float32, torch.device("cpu"), "left", seed=2)
    err, judged = judge_decoder(build_decoder("static_cache", case.layer, case.shape.seq_len), case, shape.seq_len)
    assert judged.passed and err <= judged.bound and judged == section3_judgement(err, case.ref_err)


def test_each_timed_form_is_checked_once_as_it_is_timed():
    assert checked_forms(["static_cache", "graph_static_cache", "compile_static_cache", "split_kv"]) == [
        ("static_cache", False), ("static_cache", True), ("split_kv", False)]  # the peer compiles the eager step


def test_bad_input_is_one_clear_error():
    shape = SMOKE_SUITE[0]
    ref = random_reference(shape, 0, torch.float32, torch.device("cpu"))
    decoder = build_decoder("static_cache", ref, capacity=shape.seq_len + 1)
    x = torch.randn(shape.batch, shape.seq_len, shape.d_model)
    token = torch.randn(shape.batch, 1, shape.d_model)
    with pytest.raises(ValueError, match="prefill"):
        decoder.step(token)
    right_padded = torch.ones(shape.batch, shape.seq_len, dtype=torch.bool)
    right_padded[:, -1] = False
    with pytest.raises(ValueError, match="left-padded"):
        decoder.prefill(x, right_padded)
    decoder.prefill(x)
    with pytest.raises(ValueError, match=r"one token per sequence"):
        decoder.step(torch.randn(shape.batch, 2, shape.d_model))
    with pytest.raises((TypeError, ValueError), match="float64"):
        decoder.step(token.double())
    with pytest.raises(ValueError, match="prompt.s batch"):  # a token per sequence of the prompt, no more, no fewer
        decoder.step(torch.randn(shape.batch + 1, 1, shape.d_model))
    decoder.step(token)
    with pytest.raises(ValueError, match="no room"):
        decoder.step(token)
    with pytest.raises(ValueError, match="unknown decoder 'cached'"):
        build_decoder("cached", ref, 4)
    with pytest.raises(ValueError, match="at least one layer"):
        DecodeStack("static_cache", [], 4)
    with pytest.raises(ValueError, match="only a static cache"):
        DecodeStack("growing_cache", [ref], 4, graphed=True)
    with pytest.raises(ValueError, match="padded 'left'"):
        decode_case(shape, 2, torch.float32, torch.device("cpu"), "holes")


def test_a_rewind_takes_the_step_back_exactly():
    shape = SMOKE_SUITE[0]
    case = decode_case(shape, 2, torch.float32, torch.device("cpu"), "none")
    for name in HOST_DECODERS:
        decoder = build_decoder(name, case.layer, capacity=case.shape.seq_len)
        first = run_decoder(decoder, case, shape.seq_len)  # (B, 2, C)
        decoder.rewind()
        again = decoder.step(case.x[:, -1:])
        torch.testing.assert_close(again, first[:, -1:], rtol=0, atol=0)


@pytest.mark.skipif(unavailable_reason(DEVICE) is not None, reason=str(unavailable_reason(DEVICE)))
@pytest.mark.parametrize("n_splits, position, prefetch", [(1, 130, False), (3, 130, False), (7, 130, True),
                                                           (5, 96, False), (5, 40, False)])
@pytest.mark.parametrize("rowwise", [True, False])
def test_split_kv_attention_appends_the_new_token_and_matches_sdpa_with_any_number_of_ranges(n_splits, position,
                                                                                              prefetch, rowwise):
    """Ranges of 32 keys: several real ones, one of padding only, the new token on a range's first key (96); one
    range (no merge) too; the softmax state kept per lane or per program; with other tensors asked into L2 on
    the way (a GPU's; the same result)."""
    from roofline_lib.kernels.decode_attention import split_kv_attention

    gen = torch.Generator().manual_seed(n_splits)
    B, H, S, hd = 2, 3, 150, 12
    dtype = torch.float16 if CUDA else torch.float32
    q, k_new, v_new = (torch.randn(B, H, 1, hd, generator=gen).to(DEVICE, dtype) for _ in range(3))
    k, v = (torch.randn(B, H, S, hd, generator=gen).to(DEVICE, dtype) for _ in range(2))  # past `position`: junk
    real = (torch.rand(B, S, generator=gen) > 0.3).to(torch.int8)
    real[:, 32:64] = 0  # a range of padding only
    real[:, position] = 0  # the kernel marks the new token real
    cache_k, cache_v, cache_real = k.clone(), v.clone(), real.clone().to(DEVICE)
    others = (torch.randn(1000, device=DEVICE, dtype=dtype), q.contiguous()) if prefetch else ()
    out = split_kv_attention(q, k_new, v_new, cache_k, cache_v, cache_real, torch.tensor([position], device=DEVICE),
                             n_splits, block_keys=16, rowwise=rowwise, prefetch=others)
    k[:, :, position], v[:, :, position] = k_new[:, :, 0], v_new[:, :, 0]
    real[:, position] = 1
    visible = (real.bool() & (torch.arange(S) <= position))[:, None, None, :].to(DEVICE)  # (B, 1, 1, S)
    want = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=visible)
    assert out.shape == (B, H, 1, hd) and out.dtype == dtype
    torch.testing.assert_close(out.double(), want, rtol=2e-3, atol=2e-3)
    assert torch.equal(cache_k, k) and torch.equal(cache_v, v) and torch.equal(cache_real.cpu(), real)  # appended


def test_split_kv_attention_refuses_what_it_cannot_prefetch():
    from roofline_lib.kernels.decode_attention import MAX_PREFETCHED, split_kv_attention
    t = torch.zeros(1, 1, 1, 8)
    with pytest.raises(ValueError, match=f"^prefetch takes at most {MAX_PREFETCHED} tensors, got 5$"):
        split_kv_attention(t, t, t, t, t, t, t, 1, prefetch=(t,) * 5)
    with pytest.raises(ValueError, match=r"^prefetch takes contiguous tensors \(it asks for their lines"):
        split_kv_attention(t, t, t, t, t, t, t, 1, prefetch=(torch.zeros(4, 4).t(),))


def test_a_step_that_fails_leaves_the_cache_where_it_was(monkeypatch):
    shape = SMOKE_SUITE[0]
    case = decode_case(shape, 2, torch.float32, torch.device("cpu"), "none")
    decoder = build_decoder("static_cache", case.layer, capacity=case.shape.seq_len)
    decoder.prefill(case.x[:, :shape.seq_len])
    before = int(decoder.cache.position)
    with monkeypatch.context() as patched:
        patched.setattr(decoder, "attend", lambda q: (_ for _ in ()).throw(RuntimeError("out of memory")))
        with pytest.raises(RuntimeError, match="out of memory"):
            decoder.step(case.x[:, shape.seq_len:shape.seq_len + 1])
    assert int(decoder.cache.position) == before and decoder.steps == 0
    torch.testing.assert_close(torch.cat([decoder.step(case.x[:, t:t + 1]) for t in (shape.seq_len, shape.seq_len + 1)],
                                         1), run_decoder(build_decoder("static_cache", case.layer, case.shape.seq_len),
                                                         case, shape.seq_len), rtol=0, atol=0)


def test_a_stack_steps_every_layer_and_rewinds_once():
    shape = Shape("t", 2, 8, 32, 2)
    x = torch.randn(2, 8, 32)
    token = torch.randn(2, 1, 32)
    refs = [random_reference(shape, i, torch.float32, torch.device("cpu")) for i in range(3)]
    stack = DecodeStack("static_cache", refs, capacity=9)
    stack.prefill(x)
    first = stack.step(token)
    stack.rewind()
    torch.testing.assert_close(stack.step(token), first, rtol=0, atol=0)
    by_hand = torch.cat([x, token], 1)
    for ref in refs:  # the same layers applied to the whole sequence, one after the other
        by_hand = ref(by_hand)
    torch.testing.assert_close(first, by_hand[:, -1:], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(unavailable_reason(DEVICE) is not None, reason=str(unavailable_reason(DEVICE)))
def test_a_prefetching_stack_hands_each_layer_the_weight_its_next_layer_reads_first():
    shape = Shape("t", 2, 8, 32, 2)
    dtype = torch.float16 if CUDA else torch.float32
    refs = [random_reference(shape, i, dtype, DEVICE) for i in range(3)]
    x, token = torch.randn(2, 8, 32).to(DEVICE, dtype), torch.randn(2, 1, 32).to(DEVICE, dtype)
    stack, plain = (DecodeStack("fused_split_kv", refs, capacity=10, graphed=CUDA, prefetch=on) for on in (True, False))
    layers = stack.layers
    assert all(layer.next_qkv is after.qkv.weight for layer, after in zip(layers, layers[1:] + layers[:1]))
    assert all(layer.next_qkv is None for layer in plain.layers)
    stack.prefill(x)
    plain.prefill(x)
    for _ in range(2):  # on a GPU replayed from one graph: the prefetch is a hint, the numbers are the same
        torch.testing.assert_close(stack.step(token), plain.step(token), rtol=0, atol=0)


@pytest.mark.skipif(unavailable_reason(DEVICE) is not None, reason=str(unavailable_reason(DEVICE)))
@pytest.mark.parametrize("name", ["split_kv", "fused_split_kv"])
def test_a_split_kv_decoder_over_one_key_range_passes_section_3(name, monkeypatch):
    """`n_splits=1`: one launch of the split-KV kernel per step, no merge (what a short context may want)."""
    from roofline_lib.kernels import decode_attention
    ranges, real = [], decode_attention.split_kv_attention
    signature = inspect.signature(real)
    monkeypatch.setattr(decode_attention, "split_kv_attention",
                        lambda *a, **k: ranges.append(signature.bind(*a, **k).arguments["n_splits"]) or real(*a, **k))
    record = check_decoder(name, SMOKE_SUITE[1], steps=3, dtype=DTYPES[0], device=DEVICE, padding="left", seed=1,
                           n_splits=1)
    assert record["passed"], record["reason"]
    assert ranges and set(ranges) == {1}
    ref = random_reference(SMOKE_SUITE[0], 0, DTYPES[0], DEVICE)
    for bad in (0, 2):  # a capacity of 9 holds one range of BLOCK_KEYS keys
        with pytest.raises(ValueError, match="n_splits") as raised:
            build_decoder(name, ref, 9, n_splits=bad)
        assert "\n" not in str(raised.value)


def test_an_option_a_decoder_does_not_take_is_one_line_naming_both():
    ref = random_reference(Shape("t", 2, 8, 32, 2), 0, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"^the static_cache decoder takes no option prefetch \(it takes none\)$"):
        build_decoder("static_cache", ref, 9, prefetch=True)
    with pytest.raises(ValueError, match=r"^the split_kv decoder takes no option nope \(its options: n_splits\)$"):
        DecodeStack("split_kv", [ref], 9, nope=1)
    with pytest.raises(ValueError, match=r"^prefetch needs decoders that prefetch \(fused_split_kv, layer_kernel\), "
                                         r"not mine$"):
        DecodeStack("mine", [ref], 9, decoder=lambda ref, capacity, **options: decode.StaticCacheDecoder(ref, capacity),
                    prefetch=True)


@pytest.mark.skipif(unavailable_reason(DEVICE) is not None, reason=str(unavailable_reason(DEVICE)))
def test_a_prefetching_stack_passes_the_next_layers_weight_to_its_kernels(monkeypatch):
    """What each step hands the split-KV kernel: the three later GEMMs' weights and the next layer's qkv."""
    from roofline_lib.kernels import decode_attention
    shape = Shape("t", 2, 8, 32, 2)
    dtype = torch.float16 if CUDA else torch.float32
    refs = [random_reference(shape, i, dtype, DEVICE) for i in range(2)]
    stack = DecodeStack("fused_split_kv", refs, capacity=9, prefetch=True)
    handed, attend = [], decode_attention.split_kv_attention

    def recording(*args, prefetch=(), **kwargs):
        handed.append(prefetch)
        return attend(*args, prefetch=prefetch, **kwargs)
    monkeypatch.setattr(decode_attention, "split_kv_attention", recording)
    stack.prefill(torch.randn(2, 8, 32).to(DEVICE, dtype))
    stack.step(torch.randn(2, 1, 32).to(DEVICE, dtype))
    first, second = stack.layers
    assert [[t is w for t, w in zip(h, want)] for h, want in zip(handed, [
        (first.out_proj.weight, first.fc1.weight, first.fc2.weight, second.qkv.weight),
        (second.out_proj.weight, second.fc1.weight, second.fc2.weight, first.qkv.weight)])] == [[True] * 4] * 2


def test_the_decode_floor_is_its_bytes_over_the_bandwidth():
    bytes_ = decode_step_bytes(1, 32768, 1024, torch.float16)
    cache = 2 * 32768 * 1024 * 2
    assert cache < bytes_ < cache + 13 * 1024 * 1024 * 2 + 10 * 1024 * 2  # the cache, the weights, a few vectors
    assert decode_step_flops(1, 32768, 1024) == 24 * 1024**2 + 4 * 32768 * 1024
    assert decode_floor_us(1, 32768, 1024, torch.float16, 4000, 800) == pytest.approx(bytes_ / 4e6)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["static_cache", "split_kv", "fused_split_kv"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_graphed_stack_step_passes_section_3_with_left_padding(name, dtype):
    """One CUDA graph replayed for every step: the position advances on the device, the outputs stay right."""
    shape = Shape("g", 4, 200, 512, 8)
    record = check_decoder(name, shape, steps=6, dtype=dtype, device=torch.device("cuda"), padding="left",
                           graphed=True)
    assert record["passed"], record["reason"]


@pytest.mark.slow  # the interpreter runs seven phases a step: seconds each
@pytest.mark.skipif(LAYER_KERNEL_REASON is not None, reason=str(LAYER_KERNEL_REASON))
@pytest.mark.parametrize("n_splits, split", [(1, 1), (3, 2)])
def test_the_layer_kernel_passes_section_3_with_one_key_range_or_several_and_fc2_split_or_not(n_splits, split):
    """One range: attention stores its output itself, no merge phase; several: the log-sum-exp merge. fc2 whole,
    or split into partial sums and their reduce phase."""
    from roofline_lib.kernels.decode_layer import default_config  # Triton, once known to be there

    case = decode_case(SMOKE_SUITE[1], 4, DTYPES[0], DEVICE, "left", seed=2)
    config = dataclasses.replace(default_config(), split=split)
    stack = DecodeStack("layer_kernel", [case.layer], case.shape.seq_len, config=config, phases=True,
                        n_splits=n_splits)  # as a tuning run builds it
    _, judged = judge_decoder(stack, case, SMOKE_SUITE[1].seq_len)
    assert stack.layers[0].n_splits == n_splits and stack.layers[0].config == config and judged.passed, judged.reason


@pytest.mark.slow  # the interpreter runs seven phases a step: seconds each
@pytest.mark.skipif(LAYER_KERNEL_REASON is not None, reason=str(LAYER_KERNEL_REASON))
def test_a_layer_kernel_blind_to_the_padding_fails_section_3(monkeypatch):
    """The check can fail: the same kernel handed a cache whose every key is flagged real attends to the prompts'
    padding."""
    from roofline_lib.kernels import decode_layer

    step = decode_layer.decode_layer_step
    monkeypatch.setattr(decode_layer, "decode_layer_step", lambda x_t, layer, k, v, real, *rest, **options: step(
        x_t, layer, k, v, torch.ones_like(real), *rest, **options))
    record = check_decoder("layer_kernel", SMOKE_SUITE[1], 2, DTYPES[0], DEVICE, "left", seed=1)
    assert record["status"] == "fail"


@pytest.mark.skipif(unavailable_reason("cuda", torch.float16) is not None, reason="needs Triton")
def test_the_layer_kernel_is_unavailable_in_one_line_before_compute_capability_9(monkeypatch):
    """Off the interpreter it runs where the whole-layer kernel does: a T4 (7.5) gets the reason, in one line."""
    from roofline_lib.kernels import launch  # Triton, once known to be there

    monkeypatch.setattr(launch, "INTERPRETED", False)
    monkeypatch.setattr(decode, "capability", lambda device: (7, 5))
    assert decode.layer_kernel_unavailable_reason(torch.device("cuda"), torch.float16) == (
        "it runs from compute capability 9.0 on, as the whole-layer kernel does, and this GPU's is 7.5")
    ref = random_reference(SMOKE_SUITE[0], 0, torch.float16, torch.device("cpu"))
    with pytest.raises(VariantUnavailable, match=r"^layer_kernel: [^\n]*$"):
        build_decoder("layer_kernel", ref, 20)


@pytest.mark.gpu
@pytest.mark.skipif(LAYER_KERNEL_REASON is not None, reason=str(LAYER_KERNEL_REASON))
@pytest.mark.parametrize("shape", [Shape("g", 4, 200, 512, 8), Shape("short", 1, 127, 512, 8),
                                   Shape("long cache", 4, 4000, 128, 2)], ids=lambda shape: shape.row)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("graphed", [False, True])
def test_gpu_the_persistent_layer_kernel_passes_section_3_with_left_padding(shape, dtype, graphed):
    """One cooperative launch per layer step with grid barriers, eager and replayed from a CUDA graph; on the
    "long cache" shape (8 MB of cache, 0.4 MB of weights) with the two programs per SM its default takes there."""
    record = check_decoder("layer_kernel", shape, steps=6, dtype=dtype, device=torch.device("cuda"), padding="left",
                           graphed=graphed)
    assert record["passed"], record["reason"]


@pytest.mark.gpu
@pytest.mark.skipif(LAYER_KERNEL_REASON is not None, reason=str(LAYER_KERNEL_REASON))
@pytest.mark.parametrize("shape", [Shape("g", 4, 200, 512, 8), Shape("long cache", 4, 4000, 128, 2)],
                         ids=lambda shape: shape.row)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("decoder", ["fused_split_kv", "layer_kernel"])
def test_gpu_prefetching_the_later_weights_into_l2_passes_section_3(decoder, shape, dtype):
    record = check_decoder(decoder, shape, steps=6, dtype=dtype, device=torch.device("cuda"), padding="left",
                           graphed=True, prefetch=True)
    assert record["passed"], record["reason"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("options", [{"pdl": True}, {"pdl_attention": True}], ids=["gemms", "all"])
def test_gpu_the_fused_split_kv_step_passes_section_3_with_dependent_launch(dtype, options):
    """Programmatic dependent launch changes when each kernel starts, never what it reads (left padding, graphed:
    the graph keeps the launches' programmatic edges)."""
    record = check_decoder("fused_split_kv", Shape("g", 4, 200, 512, 8), steps=6, dtype=dtype,
                           device=torch.device("cuda"), padding="left", graphed=True, **options)
    assert record["passed"], record["reason"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("gemv", [True, False], ids=["gemv", "tiles"])
def test_gpu_the_fused_split_kv_step_of_one_sequence_passes_section_3_graphed(dtype, gemv):
    """benchmarks.decode's short row (B 1, d_model 512): its GEMMs in the CUDA-core GEMV or the tiles, launched
    with programmatic dependent launch where the GPU has it, replayed from a CUDA graph."""
    record = check_decoder("fused_split_kv", Shape("short", 1, 127, 512, 8), steps=6, dtype=dtype,
                           device=torch.device("cuda"), padding="left", graphed=True, gemv=gemv)
    assert record["passed"], record["reason"]


def test_an_empty_batch_or_prompt_is_one_clear_error():
    shape = SMOKE_SUITE[0]
    ref = random_reference(shape, 0, torch.float32, torch.device("cpu"))
    for name in HOST_DECODERS:
        for empty in (torch.randn(0, 4, shape.d_model), torch.randn(2, 0, shape.d_model)):
            with pytest.raises(ValueError) as raised:
                build_decoder(name, ref, 8).prefill(empty)
            assert "\n" not in str(raised.value)


def test_fastest_graphed_is_the_graphed_decoder_of_least_time_per_shape():
    timed = pd.DataFrame({"shape": ["a", "a", "a", "b", "b"], "status": ["ok", "ok", "ok", "ok", "error"],
                          "decoder": ["static_cache", "graph_split_kv", "graph_fused_split_kv", "graph_split_kv",
                                      "graph_fused_split_kv"], "us_per_layer": [1.0, 9.0, 7.0, 5.0, None]})
    assert list(fastest_graphed(timed).decoder) == ["graph_fused_split_kv", "graph_split_kv"]  # never eager or failed


def test_the_layer_kernel_runs_the_phases_a_step_needs_over_as_many_ranges_as_fill_its_grid():
    decode_layer = pytest.importorskip("roofline_lib.kernels.decode_layer")  # Triton, where it is installed
    names = decode_layer.PHASE_NAMES
    assert [names[i] for i in decode_layer.phases_run(1, 1)] == [n for n in names if n not in ("merge", "reduce")]
    assert decode_layer.phases_run(3, 2) == tuple(range(len(names)))
    assert decode_layer.range_count(pairs=8, capacity=1000, programs=64, block_keys=64) == 8  # 8 pairs × 8 ranges
    assert decode_layer.range_count(pairs=8, capacity=100, programs=64, block_keys=64) == 2  # no range under a block
    assert decode_layer.range_count(pairs=128, capacity=1000, programs=64, block_keys=64) == 1  # pairs fill the grid


@pytest.mark.skipif(LAYER_KERNEL_REASON is not None, reason=str(LAYER_KERNEL_REASON))
def test_the_layer_kernel_doubles_its_programs_once_its_cache_outweighs_its_weights(monkeypatch):
    """On a GPU one program per SM where the weights are most of a step's bytes, two where the cache is; a decoder
    built without a configuration asks with its own cache's and weights' bytes once the prompt sets the cache up."""
    from roofline_lib.kernels import decode_layer  # Triton, once known to be there

    interpreted = decode_layer.INTERPRETED
    monkeypatch.setattr(decode_layer, "INTERPRETED", False)
    assert (decode_layer.default_config(1, 2).per_sm, decode_layer.default_config(3, 2).per_sm) == (1, 2)
    assert not any(c.unroll for c in (decode_layer.GPU_CONFIG, decode_layer.LONG_CACHE_CONFIG,
                                      decode_layer.INTERPRETED_CONFIG))  # nothing to check for unrolling
    monkeypatch.setattr(decode_layer, "INTERPRETED", interpreted)
    asked = []
    default = decode_layer.default_config
    monkeypatch.setattr(decode_layer, "default_config", lambda *sizes: asked.append(sizes) or default(*sizes))
    case = decode_case(SMOKE_SUITE[1], 1, DTYPES[0], DEVICE, "left", seed=3)
    B, N, C = case.x.shape[0], SMOKE_SUITE[1].seq_len, SMOKE_SUITE[1].d_model
    layer = build_decoder("layer_kernel", case.layer, N + 1)
    assert asked == []  # the cache is not known before the prompt
    layer.prefill(case.x[:, :N])
    itemsize = case.x.element_size()
    weights = sum(p.numel() for p in case.layer.parameters()) * itemsize
    assert asked == [(2 * B * (N + 1) * C * itemsize, weights)] and layer.config == default(*asked[0])


def test_the_layer_kernel_benchmark_names_each_launch_by_its_phase_and_refuses_bad_input_in_one_line():
    from benchmarks import decode_layer_kernel as bench
    line = pd.DataFrame({"name": ["add_", "_decode_layer_kernel", "_decode_layer_kernel", "sub_"]})
    assert list(bench.named_phases(line, (0, 1)).name) == ["add_", "phase ln1+qkv", "phase attention", "sub_"]
    with pytest.raises(RuntimeError, match="profiled 2 launches of the layer kernel, expected 3"):
        bench.named_phases(line, (0, 1, 3))
    with pytest.raises(SystemExit, match="^unknown row 'nope': use short, 32k, 100k, B16 8k$"):
        bench.main(["--out", "unused", "--rows", "nope"])
    with pytest.raises(SystemExit, match="^a configuration reads like"):
        bench.main(["--out", "unused", "--configs", "16x32"])
    with pytest.raises(SystemExit, match=r"^--contexts takes comma-separated integers, got 'lots'$"):
        bench.main(["--out", "unused", "--contexts", "128,lots"])
    with pytest.raises(SystemExit, match="^--contexts: every sequence length must be at least 2, got 1$"):
        bench.main(["--out", "unused", "--contexts", "1"])
    chosen = bench.candidates(["16x32x128/4/w4s3"])
    assert len({label for label, *_ in chosen}) == len(chosen)  # one timed name each
    assert ("graph_layer_kernel default L2-prefetch", "layer_kernel", {"prefetch": True}) in chosen
    assert ("graph_fused_split_kv no-GEMV", "fused_split_kv", {"gemv": False}) in chosen  # B = 1: the tiles
    assert ("graph_fused_split_kv 1-range", "fused_split_kv", {"n_splits": 1}) in chosen  # no merge
    if not torch.cuda.is_available():
        for argv in ([], ["--configs", "", "--only", "graph_fused_split_kv,graph_fused_split_kv no-GEMV"]):
            with pytest.raises(SystemExit, match="^this benchmark times a GPU kernel: no GPU is visible$"):
                bench.main(["--out", "unused", *argv])


def test_the_stack_grid_times_only_the_decoders_asked_and_hands_over_each_stack_as_it_ends():
    from benchmarks import decode as bench
    from roofline_lib.measure.ceilings import Ceilings
    saved = []
    ceilings = Ceilings("cpu", "fp32", 1.0, 10.0, "given")
    table = bench.stack_grid(torch.device("cpu"), torch.float32, ceilings, 0.0, smoke=True,
                             only=frozenset({"graph_static_cache"}), save=saved.append)
    assert list(table.decoder) == ["graph_static_cache"] and len(saved) == 1 and saved[0].equals(table)
    assert table.status.eq("ok").all() and table.reason.eq("").all() and (table.tokens_per_s > 0).all()
    with pytest.raises(SystemExit, match=r"^--only names no decoder the stack grid times \(graph_static_cache"):
        bench.main(["--out", "unused", "--only", "static_cache"])  # refused before any work
    with pytest.raises(SystemExit, match=r"^--only names no decoder the rows time \(compile_static_cache, "):
        bench.main(["--out", "unused", "--skip", "checks,stacks", "--only", "nope"])
