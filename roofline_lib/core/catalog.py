"""The names a front end lists without importing torch: rungs, peers, paddings, dtypes, attention strategies.

The modules that implement them import these tuples (or are tested to agree with them), so a name
is spelled in one place, and `roofline --help` stays fast.
"""
LADDER = ("reference", "sdpa_fused_qkv", "no_empty_mask", "triton_ln", "chunked", "fused_gemm", "residual_addmm",
          "fastest")  # VARIANTS, in walkthrough order
PEERS = ("compile_reference", "compile_reference_max_autotune", "compile_kept",
         "compile_kept_reduce_overhead")  # torch.compile peers
RENAMED_VARIANTS = {"compile_best": "compile_kept"}  # a name in results written before a rename → the name now
PADDINGS = ("none", "right", "left", "holes")  # key_padding_mask patterns of the inputs
DTYPE_NAMES = ("fp16", "bf16", "fp32", "fp64")
ATTENTION_STRATEGIES = ("split_cudnn", "split_flash", "split_efficient", "split_math", "lower_right",
                        "cudnn_causal", "mask")  # how a chunk attends to its key/value cache
ATTENTION_CHOICES = ("auto", *ATTENTION_STRATEGIES)  # what a chunked run may ask for: one strategy, or auto's pick
DEFAULT_CHUNK_SIZE = 16384  # the chunked layer's default on a GPU (fastest at N = 100,000 on an H200)

# decode (`variants.decode`): the decoders, and how a timed one runs — eager, replayed from a CUDA graph
# ("graph_…", static caches only), or through torch.compile(mode="reduce-overhead") ("compile_…", the peer)
DECODERS = ("naive", "growing_cache", "static_cache", "split_kv", "fused_split_kv", "layer_kernel")
STATIC_DECODERS = ("static_cache", "split_kv", "fused_split_kv", "layer_kernel")
TIMED_DECODERS = DECODERS + tuple(f"{kind}_{name}" for kind in ("graph", "compile") for name in STATIC_DECODERS)
DEFAULT_DECODERS = ("growing_cache", "static_cache", "graph_static_cache", "graph_split_kv",
                    "graph_fused_split_kv", "graph_layer_kernel")
