"""Compile the hand-written Triton kernels for a GPU target without a GPU, in every configuration their
launchers use, so that a type error the Triton interpreter lets through fails here, on any machine.

    python -m benchmarks.compile_check                # for compute capability 9.0 (Hopper) and 7.5 (a T4)

Run without TRITON_INTERPRET (the interpreter has no compiler); prints one line per configuration and exits
1 if any fails to compile.
"""
from __future__ import annotations

import itertools
import os
import sys

import triton
from triton.backends.compiler import GPUTarget

from roofline_lib.kernels import add_layer_norm as aln
from roofline_lib.kernels import decode_attention as da
from roofline_lib.kernels import decode_layer as dl
from roofline_lib.kernels import fused_linear as fl
from roofline_lib.kernels import gemv as gv

TARGETS = {"9.0": GPUTarget("cuda", 90, 32), "7.5": GPUTarget("cuda", 75, 32)}
LINEAR_SIGNATURE = {"A": "*fp16", "W": "*fp16", "BIAS": "*fp16", "RES": "*fp16", "Y": "*fp16", "LN_W": "*fp16",
                    "LN_B": "*fp16", "PARTIAL": "*fp32", "COUNTS": "*i32", "M": "i32", "N": "i32", "K": "i32",
                    "stride_am": "i32", "eps": "fp32"}
GEMV_SIGNATURE = {name: kind for name, kind in LINEAR_SIGNATURE.items() if name in gv._gemv_kernel.arg_names}
LN_SIGNATURE = {"X": "*fp16", "R": "*fp16", "SHIFT": "*fp16", "S": "*fp16", "Y": "*fp16", "W": "*fp16",
                "B": "*fp16", "stride_x": "i32", "stride_r": "i32", "M": "i32", "N": "i32", "eps": "fp32"}

# the decode-layer kernel: fp16 tensors but for these, then its sizes and scalars
DECODE_LAYER_TYPES = {"ACC": "*fp32", "M": "*fp32", "DEN": "*fp32", "PART": "*fp32", "REAL": "*i8",
                      "POSITION": "*i64", "SYNC": "*i32", "B": "i32", "HEADS": "i32", "HD": "i32", "S": "i32",
                      "eps1": "fp32", "eps2": "fp32", "scale": "fp32", "n_splits": "i32", "split_size": "i32"}

SPLIT_KV_TYPES = DECODE_LAYER_TYPES | {name: "i32" for name in ("stride_qb", "stride_qh", "stride_kb", "stride_kh",
                                                                 "stride_vb", "stride_vh", "H", "head_dim",
                                                                 "pf_numel0", "pf_numel1", "pf_numel2",
                                                                 "pf_numel3")}


def compile_one(kernel, signature: dict, constants: dict, target: GPUTarget, options: dict | None = None) -> None:
    """Compile as a launch from torch would: every pointer 16-byte aligned (Triton's specialization of a
    tensor's pointer), so that loads vectorize as they do on the GPU; a PREFETCH build must keep its prefetch."""
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(kernel.arg_names)
               if signature.get(name, "").startswith("*")}
    source = triton.compiler.ASTSource(fn=kernel, signature=signature | {k: "constexpr" for k in constants},
                                       constexprs=constants, attrs=aligned)
    compiled = triton.compile(source, target=target, options=options)
    if constants.get("PREFETCH") and "prefetch.global.L2::evict_last" not in compiled.asm["ptx"]:
        raise RuntimeError("PREFETCH set, yet no prefetch instruction in the PTX")
    if constants.get("PDL") and "griddepcontrol.wait" not in compiled.asm["ptx"]:
        raise RuntimeError("PDL set, yet no griddepcontrol.wait in the PTX")


def configurations(capability: str):
    """(kernel name, kernel, signature, constants, compile options) for each configuration worth compiling on
    `capability`."""
    pdl = (False, True) if capability == "9.0" else (False,)  # griddepcontrol needs 9.0
    # K_LN: with LN, a K whose statistics loop is unrolled (1,024) and one where it stays a loop (4,096)
    for (ln, gelu, residual, k_ln), split, with_pdl in itertools.product(
            [(True, False, False, 1024), (True, False, False, 4096), (True, True, False, 1024),
             (False, False, True, 0)], (1, 4), pdl):
        yield ("fused_linear", fl._fused_linear_kernel, LINEAR_SIGNATURE,
               dict(LN=ln, GELU=gelu, RESIDUAL=residual, K_LN=k_ln, IEEE=False, UPCAST=False, **fl.FORCED_TILE,
                    SPLIT_K=split, PDL=with_pdl), {})
    gemv = fl.parse_tile("16x16x256/2/w4s4")  # a decode step's GEMV tile, split, with its warps and stages
    yield ("fused_linear", fl._fused_linear_kernel, LINEAR_SIGNATURE,
           dict(LN=True, GELU=False, RESIDUAL=False, K_LN=1024, IEEE=False, UPCAST=False, **gemv.kwargs, PDL=pdl[-1]),
           {"num_warps": gemv.num_warps, "num_stages": gemv.num_stages})
    # the GEMV of a B = 1 step's projections at d_model 1024 (qkv, out_proj, fc1, fc2), in `gemv_block`'s blocks
    for (ln, gelu, residual, k), with_pdl in itertools.product(
            [(True, False, False, 1024), (False, False, True, 1024), (True, True, False, 1024),
             (False, False, True, 4096)], pdl):
        block_n, warps = gv.gemv_block(k)
        yield ("gemv", gv._gemv_kernel, GEMV_SIGNATURE,
               dict(LN=ln, GELU=gelu, RESIDUAL=residual, BLOCK_N=block_n, BLOCK_K=k, PDL=with_pdl),
               {"num_warps": warps})
    for direct, prefetch, with_pdl in itertools.product((True, False), (False, True) if capability == "9.0"
                                                        else (False,), pdl):
        constants = dict(BLOCK_N=da.BLOCK_KEYS, BLOCK_D=64, STAGES=da.STAGES, ROWWISE=da.ROWWISE, DIRECT=direct,
                         PREFETCH=prefetch, PREFETCH_LINES=32 * da.WARPS, PDL=with_pdl)  # prefetch: 8.0 on
        signature = {name: SPLIT_KV_TYPES.get(name, "*fp16") for name in da._split_kv_kernel.arg_names
                     if name not in constants}
        yield "split_kv", da._split_kv_kernel, signature, constants, {}
    for with_pdl in pdl:
        constants = dict(BLOCK_S=4, BLOCK_D=64, PDL=with_pdl)
        signature = {name: SPLIT_KV_TYPES.get(name, "*fp16") for name in da._merge_kernel.arg_names
                     if name not in constants}
        yield "merge", da._merge_kernel, signature, constants, {}
    if capability == "9.0":  # the persistent kernels need Hopper's grid-wide launch
        config = dl.default_config()
        for direct, prefetch in itertools.product((True, False), (False, True)):
            constants = dict(C=1024, F=4096, RUN=sum(1 << i for i in dl.phases_run(1 if direct else 4, config.split)),
                             BARRIERS=True, NPROG=132, SPLIT=config.split, UPCAST=False, UNROLL=False,
                             BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                             BLOCK_KEYS=dl.BLOCK_KEYS, BLOCK_D=64, BLOCK_S=4, STAGES=dl.STAGES,
                             ROWWISE=dl.ROWWISE, DIRECT=direct, PREFETCH=prefetch,
                             PREFETCH_LINES=32 * config.warps)
            signature = {name: DECODE_LAYER_TYPES.get(name, "*fp16") for name in dl._decode_layer_kernel.arg_names
                         if name not in constants}
            yield "decode_layer", dl._decode_layer_kernel, signature, constants, {}
    for residual, shift, with_pdl in itertools.product((False, True), (False, True), pdl):
        yield ("add_layer_norm", aln._add_layer_norm_fwd_kernel, LN_SIGNATURE,
               dict(HAS_RESIDUAL=residual, HAS_SHIFT=shift, BLOCK_SIZE=1024, ROWS_PER_PROGRAM=4, PDL=with_pdl), {})


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("TRITON_INTERPRET") == "1" or aln.INTERPRETED:
        print("error: run without TRITON_INTERPRET=1: the interpreter compiles nothing", file=sys.stderr)
        return 2
    failed = 0
    for capability, target in TARGETS.items():
        for name, kernel, signature, constants, options in configurations(capability):
            shown = ", ".join(f"{k}={v}" for k, v in (constants | options).items() if not k.startswith("BLOCK"))
            try:
                compile_one(kernel, signature, constants, target, options)
                print(f"ok    {capability} {name}: {shown}")
            except Exception as exc:  # noqa: BLE001 (each configuration's failure is reported, not raised)
                failed += 1
                print(f"FAIL  {capability} {name}: {shown}: {str(exc).strip().splitlines()[-1][:200]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
