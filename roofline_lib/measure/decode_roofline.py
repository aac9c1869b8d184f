"""The roofline of one decode step: the bytes it must move and the FLOPs it must do, per layer.

A step computes one token per sequence: the four GEMMs are matrix-vector products (24·B·d² FLOPs) that must
still read every weight once, and attention reads the whole cache — each position's key and value — for two
multiply-adds per element (4·B·L·d FLOPs over L positions). So a step moves bytes, not FLOPs: at B 1 its
intensity is about 1 FLOP per byte, two hundred times left of an H200's ridge, and its floor is its bytes over
the memory bandwidth. The bytes that must move: the weights and biases once, the cache read, the new key and
value written, the token read and the output written.
"""
from __future__ import annotations

import torch

from ..core.shapes import Shape
from .roofline import layer_min_bytes


def decode_step_bytes(batch: int, context: int, d_model: int, dtype: torch.dtype) -> int:
    """Fewest bytes of one step of one layer with `context` positions attended (the new one included)."""
    element = torch.finfo(dtype).bits // 8
    weights_and_token = layer_min_bytes(Shape("", batch, 1, d_model, 1), dtype)  # weights once, x in, out
    cache_read = 2 * batch * context * d_model * element  # every key and value so far
    cache_written = 2 * batch * d_model * element  # the new key and value
    return weights_and_token + cache_read + cache_written


def decode_step_flops(batch: int, context: int, d_model: int) -> int:
    """Useful FLOPs of one step of one layer: the GEMMs on one token per sequence, attention over `context`."""
    return 24 * batch * d_model * d_model + 4 * batch * context * d_model


def decode_floor_us(batch: int, context: int, d_model: int, dtype: torch.dtype, copy_gbps: float,
                    matmul_tflops: float) -> float:
    """The step's floor in µs: the larger of its bytes over the bandwidth and its FLOPs over the matmul rate."""
    memory = decode_step_bytes(batch, context, d_model, dtype) / (copy_gbps * 1e3)
    compute = decode_step_flops(batch, context, d_model) / (matmul_tflops * 1e6)
    return max(memory, compute)
