"""Print the schemas of the SDPA backend ops this torch build exposes (what a chunked path can call)."""
import torch

for name in ["_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention", "_flash_attention_forward"]:
    op = getattr(torch.ops.aten, name, None)
    print(name, "->", op.default._schema if op is not None else "missing")
