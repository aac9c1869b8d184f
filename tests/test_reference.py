"""ReferenceLayer against an independent float64 computation of docs/design.md §1, and the sampled truth."""
import math

import pytest
import torch

from roofline_lib import ReferenceLayer, Shape, float64_truth, sample_rows
from roofline_lib.core.correctness import padding_mask, random_reference


def loop_reference(layer: ReferenceLayer, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """§1 with explicit per-query, per-head loops in float64: slow and obviously right."""
    x = x.double()
    B, N, C = x.shape
    H = layer.n_heads
    hd = C // H
    W = {n: p.double() for n, p in layer.named_parameters()}

    def ln(t, w, b):
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + 1e-5) * w + b

    out = torch.empty_like(x)
    for b in range(B):
        h = ln(x[b], W["ln1.weight"], W["ln1.bias"])  # (N, C)
        q = h @ W["q_proj.weight"].T + W["q_proj.bias"]
        k = h @ W["k_proj.weight"].T + W["k_proj.bias"]
        v = h @ W["v_proj.weight"].T + W["v_proj.bias"]
        y = torch.zeros(N, C, dtype=torch.float64)
        for i in range(N):
            for head in range(H):
                sl = slice(head * hd, (head + 1) * hd)
                keys = [j for j in range(i + 1) if mask is None or mask[b, j]]
                if not keys:  # a padded query with no real key before it: unspecified, never compared
                    continue
                scores = torch.stack([q[i, sl] @ k[j, sl] / math.sqrt(hd) for j in keys])
                w = torch.softmax(scores, 0)
                y[i, sl] = sum(w[n] * v[j, sl] for n, j in enumerate(keys))
        r = x[b] + y @ W["out_proj.weight"].T + W["out_proj.bias"]
        m = ln(r, W["ln2.weight"], W["ln2.bias"]) @ W["fc1.weight"].T + W["fc1.bias"]
        m = 0.5 * m * (1 + torch.erf(m / math.sqrt(2)))
        out[b] = r + m @ W["fc2.weight"].T + W["fc2.bias"]
    return out


@pytest.mark.parametrize("padding", ["none", "left", "holes"])
def test_reference_matches_loop_computation(cpu, padding):
    shape = Shape("t", 2, 11, 12, 3)
    layer = random_reference(shape, 3, torch.float64, cpu)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 11, 12, generator=gen, dtype=torch.float64)
    mask = padding_mask(2, 11, padding, gen)
    want = loop_reference(layer, x, mask)
    got = layer(x, mask)
    valid = torch.ones(2, 11, dtype=torch.bool) if mask is None else mask
    torch.testing.assert_close(got[valid], want[valid], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(float64_truth(layer, x, mask)[valid], want[valid], rtol=1e-10, atol=1e-10)


def test_reference_structure():
    layer = ReferenceLayer(64, 4)
    names = {n for n, _ in layer.named_children()}
    assert names == {"ln1", "q_proj", "k_proj", "v_proj", "out_proj", "ln2", "fc1", "fc2"}
    assert layer.fc1.out_features == 256 and layer.fc2.in_features == 256
    assert all(m.bias is not None for m in (layer.q_proj, layer.fc1, layer.fc2, layer.out_proj))
    assert not layer.training


def test_reference_builds_and_applies_the_empty_mask():
    """The naive layer really does two masked_fill passes even without padding (the step-3 finding)."""
    layer = ReferenceLayer(32, 2)
    x = torch.randn(1, 8, 32)
    seen = []
    original = torch.Tensor.masked_fill

    def counting(self, *args, **kwargs):
        seen.append(tuple(self.shape))
        return original(self, *args, **kwargs)

    torch.Tensor.masked_fill = counting
    try:
        layer(x)
    finally:
        torch.Tensor.masked_fill = original
    assert seen == [(1, 2, 8, 8), (1, 2, 8, 8)]


@pytest.mark.parametrize("padding", ["none", "left", "holes"])
def test_sampled_truth_equals_full_truth(cpu, padding):
    shape = Shape("t", 3, 150, 24, 4)
    layer = random_reference(shape, 1, torch.float32, cpu)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(3, 150, 24, generator=gen)
    mask = padding_mask(3, 150, padding, gen)
    rows = sample_rows(150, 64)
    assert rows[0] == 0 and rows[-1] == 149 and len(rows) == 64
    full = float64_truth(layer, x, mask)
    sampled = float64_truth(layer, x, mask, rows=rows, block_bytes=4096)  # many small query blocks
    torch.testing.assert_close(sampled, full[:, rows], rtol=1e-12, atol=1e-12, equal_nan=True)


def test_sample_rows_short_sequence():
    assert sample_rows(5, 64).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("padding", ["none", "left", "holes"])
def test_truth_streamed_over_single_key_blocks_equals_the_full_truth(padding):
    """The running softmax over key blocks changes nothing but float64 rounding, whatever the block size."""
    layer = random_reference(Shape("t", 2, 29, 24, 3), 5, torch.float64, torch.device("cpu"))
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 29, 24, generator=gen, dtype=torch.float64)
    mask = padding_mask(2, 29, padding, gen)
    rows = sample_rows(29, 7)
    full = float64_truth(layer, x, mask)
    one_key = float64_truth(layer, x, mask, rows=rows, block_bytes=1)  # one key per block
    valid = torch.ones(2, len(rows), dtype=torch.bool) if mask is None else mask[:, rows]
    torch.testing.assert_close(one_key[valid], full[:, rows][valid], rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
def test_streamed_truth_keeps_its_extra_memory_under_the_block_budget():
    device = torch.device("cuda")
    shape = Shape("t", 1, 200_000, 256, 4)
    layer = random_reference(shape, 0, torch.float16, device)
    x = torch.randn(1, shape.seq_len, shape.d_model, device=device, dtype=torch.float16)
    rows = sample_rows(shape.seq_len)
    budget = 64 * 2**20
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    float64_truth(layer, x, rows=rows, block_bytes=budget)
    extra = torch.cuda.max_memory_allocated() - before
    assert extra < 2 * budget, f"{extra / 2**20:.0f} MiB beyond the inputs for a {budget / 2**20:.0f} MiB budget"
