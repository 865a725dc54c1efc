"""What torchtitan's op-level selective activation checkpointing keeps of a gated (SwiGLU) block, eager and
under torch.compile.

Usage: python benchmarks/torch_sac_saved.py   (needs torch; CPU is enough)

The block is a small Llama-style one (RMSNorm, q/k/v/o projections, causal SDPA, w1/w3/w2 SwiGLU MLP, both
residual adds) in fp32, checkpointed with torchtitan's op policy (9dec370 parallelize_llama.py: save the
outputs of mm and SDPA, except every second mm; recompute the rest). Eager: the bytes per token still live
after the forward besides the parameters, tracked per storage. Compiled: the forward graph's outputs after
AOTAutograd's min-cut partitioner, i.e. what the compiled block saves for backward. The eager block keeps
wq, wv, w1 and w2's outputs, the attention output and its log-sum-exp; the compiled one the same less w2's
output, which no backward reads (planner/training/memory.py, op-level AC).
"""

from __future__ import annotations

import weakref
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

H, FF, HEADS, TOKENS = 64, 176, 4, 16
SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default}


def _context():  # type: ignore[no-untyped-def]
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):  # type: ignore[no-untyped-def]
        key = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            counts[key] += 1
        keep = func in SAVE and not (func == torch.ops.aten.mm.default and counts[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(H, H, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(H, FF, bias=False), nn.Linear(H, FF, bias=False)
        self.w2 = nn.Linear(FF, H, bias=False)

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        n = F.rms_norm(x, (H,))
        q, k, v = (w(n).view(b, t, HEADS, H // HEADS).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, H)
        h = x + self.wo(att)
        m = F.rms_norm(h, (H,))
        return h + self.w2(F.silu(self.w1(m)) * self.w3(m))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self._body, x, use_reentrant=False, context_fn=_context)


class _Live(TorchDispatchMode):
    def __init__(self, ignore: set[int]) -> None:
        super().__init__()
        self.ignore, self.live = ignore, {}  # type: ignore[var-annotated]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                key = s.data_ptr()
                if key not in self.ignore and key not in self.live:
                    self.live[key] = s.nbytes()
                    weakref.finalize(s, self.live.pop, key, None)
        return out


def eager_kept_bytes_per_token() -> float:
    block = Block()
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    x = torch.randn(1, TOKENS, H, requires_grad=True)
    mode = _Live(params | {x.untyped_storage().data_ptr()})
    with mode:
        y = block(x)
    kept = sum(mode.live.values()) - y.untyped_storage().nbytes()
    return kept / TOKENS


def compiled_saved_shapes() -> list[tuple[int, ...]]:
    shapes: list[tuple[int, ...]] = []

    def forward_compiler(gm, _inputs):  # type: ignore[no-untyped-def]
        out = next(n for n in gm.graph.nodes if n.op == "output")
        shapes.extend(tuple(v.meta["val"].shape) for v in out.args[0][1:])  # [0] is the block's output
        return gm

    def backend(gm, inputs):  # type: ignore[no-untyped-def]
        return aot_module_simplified(gm, inputs, fw_compiler=forward_compiler, bw_compiler=lambda g, _i: g,
                                     partition_fn=min_cut_rematerialization_partition)

    block = Block()
    x = torch.randn(1, TOKENS, H, requires_grad=True)
    torch.compile(block, backend=backend, fullgraph=True)(x).sum().backward()
    return [s for s in shapes if s[0] != FF and s != (H, H) and s != (H, FF)]  # drop the weights


def main() -> None:
    elem = 4  # fp32
    print(f"torch {torch.__version__}, h {H}, ffn {FF}, {HEADS} heads, {TOKENS} tokens")
    print(f"eager keeps {eager_kept_bytes_per_token():.0f} bytes per token: wq, wv, attention, w2 outputs "
          f"{4 * H * elem}, w1 output {FF * elem}, log-sum-exp {HEADS * elem} = {(4 * H + FF + HEADS) * elem}")
    print(f"compiled saves (besides the weights): {compiled_saved_shapes()}  (x, wq, wv, attention, lse, w1: no w2)")


if __name__ == "__main__":
    main()
