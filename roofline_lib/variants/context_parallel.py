"""Context parallel: the layer with its sequence split over the processes of a `torch.distributed` group.

Each rank holds a share of the tokens; LayerNorms, projections and the MLP are local to it. Attention
passes key/value blocks around a ring: at step s a rank attends its queries to the block it holds
(its own at s = 0), while it sends that block on to the next rank and receives the next from the
previous one (`batch_isend_irecv`, overlapped with the compute). Partial results are merged by their
log-sum-exp, the same merge the chunked layer uses between a chunk's prefix and its diagonal block.

Zigzag layout: the sequence is cut into 2P pieces of (nearly) equal length and rank r holds pieces r
and 2P-1-r, so every rank has one early and one late piece and the causal work is balanced — without
it the last rank would attend to every key and the first to almost none. Piece pairs that the causal
mask hides entirely are skipped; pairs wholly in the past need no mask; the rest get the exact mask
of their absolute positions, one chunk of queries at a time. A real `key_padding_mask` is honoured across
rank borders (every rank holds the (B, N) mask: N booleans per sequence, small next to the activations,
which grow with N / P). Joining a group, measuring and launching processes are `runs.context_parallel`'s.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ..core.catalog import DEFAULT_CHUNK_SIZE
from ..core.checks import check_layer_input
from ..core.outcome import first_line
from ..core.reference import ReferenceLayer
from .chunk_attention import attend_cudnn, attend_efficient, attend_math, self_check, strategy_switched_off
from .parts import causal_padding_mask, fuse_qkv, merge_heads, split_qkv

RING_ATTENTION_KERNELS = {"math": attend_math, "cudnn": attend_cudnn, "efficient": attend_efficient}


def pieces(seq_len: int, world: int) -> list[tuple[int, int]]:
    """The 2·world pieces [start, end) of the sequence, as equal as possible (the first ones one longer)."""
    if seq_len < 2 * world:
        raise ValueError(f"a sequence of {seq_len} tokens is too short for {world} ranks: "
                         f"the zigzag layout needs at least 2 × {world} = {2 * world} tokens")
    size, extra = divmod(seq_len, 2 * world)
    bounds = [0]
    for i in range(2 * world):
        bounds.append(bounds[-1] + size + (i < extra))
    return list(zip(bounds[:-1], bounds[1:]))


def rank_pieces(seq_len: int, world: int, rank: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The two pieces rank `rank` holds: r and 2P-1-r."""
    cut = pieces(seq_len, world)
    return cut[rank], cut[2 * world - 1 - rank]


def rank_positions(seq_len: int, world: int, rank: int) -> torch.Tensor:
    """(L_r,) the absolute positions of the tokens rank `rank` holds, in the order it holds them."""
    (a, b), (c, d) = rank_pieces(seq_len, world, rank)
    return torch.cat([torch.arange(a, b), torch.arange(c, d)])


def shard(x: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s share of a full (B, N, ...) tensor: its two pieces, concatenated along dim 1."""
    (a, b), (c, d) = rank_pieces(x.shape[1], world, rank)
    return torch.cat([x[:, a:b], x[:, c:d]], dim=1)


def schedule(seq_len: int, world: int) -> list[dict]:
    """Every (step, rank, query piece, key piece) pair of the ring and what is done with it: "skipped"
    (the causal mask hides it all), "full" (every key is in the past: no mask) or "masked" (the diagonal).
    The figure of the walkthrough is drawn from this, the very rule `ContextParallelLayer` follows."""
    cut = pieces(seq_len, world)
    rows = []
    for step in range(world):
        for rank in range(world):
            source = (rank - step) % world
            for q_piece in (rank, 2 * world - 1 - rank):
                for k_piece in (source, 2 * world - 1 - source):
                    rows.append({"step": step, "rank": rank, "query_piece": q_piece, "key_piece": k_piece,
                                 "work": _pair_kind(cut[q_piece], cut[k_piece])})
    return rows


def _pair_kind(q: tuple[int, int], k: tuple[int, int]) -> str:
    if k[0] >= q[1]:
        return "skipped"
    return "full" if k[1] - 1 <= q[0] else "masked"


def _merge(out: torch.Tensor, lse: torch.Tensor, part: torch.Tensor, part_lse: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the union of two disjoint key sets, from each one's output (float) and log-sum-exp;
    rows that have seen no key yet (lse -inf) stay 0."""
    new = torch.logaddexp(lse, part_lse)  # (B, H, L)
    safe = new.masked_fill(new == float("-inf"), 0)
    keep, take = torch.exp(lse - safe).unsqueeze(-1), torch.exp(part_lse - safe).unsqueeze(-1)
    return out * keep + part.to(out.dtype) * take, new


def choose_kernel(device: torch.device, dtype: torch.dtype, head_dim: int) -> str:
    """The attention kernel for the ring: cuDNN, then memory-efficient, where they pass the chunked layer's
    padded self-check and are not switched off; exact math otherwise (and always on the CPU)."""
    if device.type == "cuda":
        for name in ("cudnn", "efficient"):
            strategy = f"split_{name}"
            if strategy_switched_off(strategy) is None and self_check(strategy, device, dtype, head_dim, True) is None:
                return name
    return "math"


@dataclass(frozen=True)
class _Block:
    kv: torch.Tensor  # (2, B, H, L, hd): keys and values of the block
    rank: int  # whose tokens they are


class ContextParallelLayer(nn.Module):
    """The reference's function on this rank's share of the sequence (`shard`), in a process group.

    `forward(x_local, key_padding_mask)` takes this rank's tokens (B, L_r, C) and the whole (B, N) mask
    (or None) and returns this rank's outputs (B, L_r, C). Every rank of `group` calls it together.
    """

    def __init__(self, ref: ReferenceLayer, group: dist.ProcessGroup | None = None, kernel: str | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE):
        super().__init__()
        if not (isinstance(chunk_size, int) and chunk_size >= 1):
            raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
        if not dist.is_initialized():
            raise ValueError("context parallel needs an initialized torch.distributed process group "
                             "(see runs.context_parallel.init)")
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)
        self.d_model, self.n_heads = ref.d_model, ref.n_heads
        self.ln1, self.out_proj, self.ln2, self.fc1, self.fc2 = ref.ln1, ref.out_proj, ref.ln2, ref.fc1, ref.fc2
        self.qkv_proj = fuse_qkv(ref)
        weight = ref.ln1.weight
        name = kernel or choose_kernel(weight.device, weight.dtype, ref.d_model // ref.n_heads)
        if name not in RING_ATTENTION_KERNELS:
            raise ValueError(f"unknown attention kernel {name!r}: use one of {', '.join(RING_ATTENTION_KERNELS)}")
        self.kernel_name, self.kernel, self.chunk_size = name, RING_ATTENTION_KERNELS[name], chunk_size
        self.eval()

    def _agree(self, x_local: torch.Tensor, seq_len: int) -> None:
        """Raise the same clear error on every rank if one rank's input does not fit the layout."""
        expected = rank_positions(seq_len, self.world, self.rank).numel()
        codes = {torch.float16: 1, torch.bfloat16: 2, torch.float32: 3, torch.float64: 4}
        if isinstance(x_local, torch.Tensor) and x_local.dim() == 3:
            B, L, C = x_local.shape
            described = [B, L - expected, C, codes.get(x_local.dtype, 0)]
        else:
            described = [-1, -1, -1, -1]
        mine = torch.tensor(described, dtype=torch.int64, device=self.ln1.weight.device)
        every = [torch.empty_like(mine) for _ in range(self.world)]
        self._talk(lambda: dist.all_gather(every, mine, group=self.group))
        bad = [r for r, t in enumerate(every)
               if t[1] != 0 or t[0] < 0 or not torch.equal(t[[0, 2, 3]], every[0][[0, 2, 3]])]
        if bad:
            raise ValueError(f"context parallel: rank(s) {', '.join(map(str, bad))} hold an input that does not "
                             f"match the others' batch, d_model and dtype, or their share of the {seq_len} tokens")

    def _attend_block(self, q: torch.Tensor, q_pos: tuple, block: _Block, seq_len: int,
                      key_padding_mask: torch.Tensor | None, out: torch.Tensor, lse: torch.Tensor):
        """Fold one key/value block into the running (out, lse) of this rank's two query pieces."""
        k_all, v_all = block.kv.unbind(0)  # each (B, H, L_k, hd)
        k_cut = rank_pieces(seq_len, self.world, block.rank)
        splits = [b - a for a, b in k_cut]
        ks, vs = k_all.split(splits, dim=2), v_all.split(splits, dim=2)
        offset = 0
        for qa, qb in q_pos:
            rows = slice(offset, offset + qb - qa)
            for (ka, kb), k, v in zip(k_cut, ks, vs):
                kind = _pair_kind((qa, qb), (ka, kb))
                if kind == "skipped" or kb == ka:
                    continue
                real = None if key_padding_mask is None else key_padding_mask[:, ka:kb]  # (B, L_k)
                if kind == "full":
                    self._fold(q[:, :, rows], k, v, None if real is None else real[:, None, None, :], False,
                               out[:, :, rows], lse[:, :, rows])
                else:
                    self._fold_masked(q[:, :, rows], qa, k, v, ka, real, out[:, :, rows], lse[:, :, rows])
            offset += qb - qa

    def _fold(self, q, k, v, mask, is_causal, out, lse) -> None:
        """Fold attention of queries q over keys k, v into the views (out, lse) in place."""
        part, part_lse = self.kernel(q, k, v, mask, is_causal)
        part_lse = part_lse.to(lse.dtype).masked_fill(~torch.isfinite(part_lse), float("-inf"))
        out[:], lse[:] = _merge(out, lse, part, part_lse)

    def _fold_masked(self, q, qa: int, k, v, ka: int, real: torch.Tensor | None, out, lse) -> None:
        """A pair the causal mask cuts: queries at qa… (B, H, L_q, hd) over keys at ka…, in query chunks of
        `chunk_size`, so no mask is larger than (B, 1, chunk, chunk): each chunk sees the keys before it in
        full (padding only) and the keys beside it through a causal mask (or is_causal, when square)."""
        n_keys = k.shape[2]
        for start in range(0, q.shape[2], self.chunk_size):
            end = min(start + self.chunk_size, q.shape[2])
            ca, cb = qa + start, qa + end  # absolute query positions of the chunk
            seen = min(max(ca - ka, 0), n_keys)  # keys [0, seen) precede every query of the chunk
            last = min(cb - ka, n_keys)  # keys [seen, last) sit beside the chunk
            rows = slice(start, end)
            if seen > 0:
                mask = None if real is None else real[:, None, None, :seen]  # (B, 1, 1, seen)
                self._fold(q[:, :, rows], k[:, :, :seen], v[:, :, :seen], mask, False, out[:, :, rows],
                           lse[:, :, rows])
            if last > seen:
                if real is None and last - seen == end - start and ka + seen == ca:
                    mask, is_causal = None, True  # a square diagonal block
                else:
                    keys = real[:, seen:last] if real is not None else torch.ones(
                        q.shape[0], last - seen, dtype=torch.bool, device=q.device)
                    mask, is_causal = causal_padding_mask(keys, end - start, ca - ka - seen), False  # (B, 1, c, ·)
                self._fold(q[:, :, rows], k[:, :, seen:last], v[:, :, seen:last], mask, is_causal,
                           out[:, :, rows], lse[:, :, rows])

    def _talk(self, fn):
        """A collective or point-to-point call; a peer that died or hung (past the group's timeout) becomes
        one clear error on this rank instead of a hang or a backend traceback."""
        try:
            return fn()
        except (RuntimeError, dist.DistError) as exc:
            raise RuntimeError(f"context parallel, rank {self.rank} of {self.world}: another rank stopped or did "
                               f"not answer in time ({first_line(exc, 160)})") from None

    @torch.no_grad()
    def forward(self, x_local: torch.Tensor, key_padding_mask: torch.Tensor | None = None,
                seq_len: int | None = None) -> torch.Tensor:
        if seq_len is None:
            if key_padding_mask is None:
                raise ValueError("give seq_len (the whole sequence's length) or the (B, N) key_padding_mask")
            seq_len = key_padding_mask.shape[1]
        self._agree(x_local, seq_len)  # first, so a bad input on one rank stops every rank with the same error
        check_layer_input(self, x_local, None)
        B, L, C = x_local.shape
        q, k, v = split_qkv(self.qkv_proj(self.ln1(x_local)), self.n_heads)  # each (B, H, L, hd)
        block = _Block(torch.stack([k, v]).contiguous(), self.rank)  # (2, B, H, L, hd)
        acc = torch.promote_types(q.dtype, torch.float32)
        out = torch.zeros(*q.shape, dtype=acc, device=q.device)  # (B, H, L, hd), merged so far
        lse = torch.full(q.shape[:3], float("-inf"), dtype=acc, device=q.device)  # (B, H, L)
        q_pos = rank_pieces(seq_len, self.world, self.rank)
        for step in range(self.world):
            requests, incoming = [], None
            if step < self.world - 1:  # pass the block on while attending to it
                source = (self.rank - step - 1) % self.world
                length = rank_positions(seq_len, self.world, source).numel()
                incoming = torch.empty(2, B, self.n_heads, length, C // self.n_heads, dtype=q.dtype,
                                       device=q.device)
                ops = [dist.P2POp(dist.isend, block.kv, (self.rank + 1) % self.world, self.group),
                       dist.P2POp(dist.irecv, incoming, (self.rank - 1) % self.world, self.group)]
                requests = self._talk(lambda: dist.batch_isend_irecv(ops))
            self._attend_block(q, q_pos, block, seq_len, key_padding_mask, out, lse)
            for request in requests:
                self._talk(request.wait)
            if incoming is not None:
                block = _Block(incoming, source)
        x = x_local + self.out_proj(merge_heads(out.to(q.dtype)))  # (B, L, C)
        del q, k, v, block, out, lse
        for start in range(0, L, self.chunk_size):  # the MLP chunk by chunk: its (B, chunk, 4C) stays small
            part = x[:, start:start + self.chunk_size]  # (B, chunk, C), a view written in place
            part += self.fc2(F.gelu(self.fc1(self.ln2(part))))
        return x


def gather(out_local: torch.Tensor, seq_len: int, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The whole (B, N, C) output on every rank from each rank's share (for checks on small problems:
    it holds N tokens, which the layer itself never does)."""
    world = dist.get_world_size(group)
    longest = max(rank_positions(seq_len, world, r).numel() for r in range(world))
    padded = F.pad(out_local, (0, 0, 0, longest - out_local.shape[1]))  # (B, longest, C): equal sizes
    every = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(every, padded, group=group)
    full = out_local.new_empty(out_local.shape[0], seq_len, out_local.shape[2])
    for r, share in enumerate(every):
        positions = rank_positions(seq_len, world, r).to(full.device)
        full[:, positions] = share[:, :positions.numel()]
    return full


def gather_rows(out_local: torch.Tensor, rows: torch.Tensor, seq_len: int,
                group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The outputs at query positions `rows` (R,), (B, R, C), on every rank: each rank contributes the rows
    it holds (the others are zeros), and one all-reduce sums them. Memory: R rows, never N."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    positions = rank_positions(seq_len, world, rank).to(out_local.device)
    where = {int(p): i for i, p in enumerate(positions.tolist())}
    picked = torch.zeros(out_local.shape[0], len(rows), out_local.shape[2], dtype=out_local.dtype,
                         device=out_local.device)
    for j, r in enumerate(rows.tolist()):
        if r in where:
            picked[:, j] = out_local[:, where[r]]
    dist.all_reduce(picked, group=group)
    return picked
