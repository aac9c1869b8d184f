"""Input checks shared by the reference and every variant: bad input fails loudly, never silently."""
from __future__ import annotations

import torch


def check_positive_int(name: str, value: object) -> None:
    """Raise unless `value` is a positive int (a bool, a float such as 4.0 or a string such as '4' is refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def parse_lengths(text: str, name: str, minimum: int = 1) -> list[int]:
    """Comma-separated sequence lengths from a command line ("100000,1000000"), each at least `minimum`, or a
    one-line ValueError that names the option (`name`) and the bad item."""
    lengths = []
    for item in text.split(","):
        try:
            lengths.append(int(item))
        except ValueError:
            raise ValueError(f"{name} takes comma-separated integers, got {item.strip()!r}") from None
        if lengths[-1] < minimum:
            raise ValueError(f"{name}: every sequence length must be at least {minimum}, got {lengths[-1]}")
    return lengths


def check_head_split(d_model: int, n_heads: int) -> None:
    """Raise if `d_model` and `n_heads` are not positive integers or `d_model` cannot be split into `n_heads` heads."""
    check_positive_int("d_model", d_model)
    check_positive_int("n_heads", n_heads)
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) is not divisible by n_heads ({n_heads})")


def check_layer_input(layer: torch.nn.Module, x: torch.Tensor, key_padding_mask: torch.Tensor | None) -> None:
    """Raise a clear error if `x` or `key_padding_mask` does not fit `layer` (which has `d_model` and `ln1`).

    An empty batch or sequence is refused, by every layer alike: the reference has nothing to compute on it,
    so there is no truth an empty output could be checked against."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must be a 3-D tensor (batch, seq_len, d_model), got {got}")
    B, N, C = x.shape
    if B < 1 or N < 1:
        raise ValueError(f"x holds no tokens: its batch ({B}) and seq_len ({N}) must both be at least 1")
    if C != layer.d_model:
        raise ValueError(f"x's last dimension is {C}, but the layer has d_model={layer.d_model}")
    weight = layer.ln1.weight
    if x.dtype != weight.dtype:
        raise TypeError(f"x is {x.dtype} but the layer's weights are {weight.dtype}: "
                        f"convert one of them (e.g. x.to({weight.dtype}))")
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device} but the layer is on {weight.device}")
    if key_padding_mask is None:
        return
    if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool:
        got = key_padding_mask.dtype if isinstance(key_padding_mask, torch.Tensor) else type(key_padding_mask).__name__
        raise TypeError(f"key_padding_mask must be a bool tensor (True = real token), got {got}")
    if tuple(key_padding_mask.shape) != (B, N):
        raise ValueError(f"key_padding_mask must have shape (batch, seq_len) = {(B, N)}, "
                         f"got {tuple(key_padding_mask.shape)}")
    if key_padding_mask.device != x.device:
        raise ValueError(f"key_padding_mask is on {key_padding_mask.device} but x is on {x.device}")
