"""Does torch.compile's selective activation checkpointing replay a tensor-parallel all-gather in the backward when
the policy saves the matmuls and the reduce-scatters but not the all-gathers (torchtitan's op-level AC: its
_save_list, torchtitan/models/llama3/parallelize_llama.py @ 820504e)?

Usage: python benchmarks/torch_sac_collectives.py   (needs torch; CPU and a fake process group are enough: the graphs
are traced and partitioned, and the collectives never run)

One sequence-parallel block (norm, all-gather of the sequence, a column- and a row-parallel matmul, reduce-scatter)
under torch.utils.checkpoint with that policy, compiled through AOTAutograd with Inductor's decompositions and
partitioner. Prints the collectives and matmuls of the forward and of the backward graph: the backward holds the
forward's all-gather again (recomputing the input of the column-parallel weight's gradient) beside its own
all-gather and reduce-scatter (the gradients of the forward's reduce-scatter and all-gather). planner's
training.time.layer_time charges that replay under recompute op with sequence parallelism (torch 2.13 CPU).
"""

from __future__ import annotations

import functools

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from torch.testing._internal.distributed.fake_pg import FakeStore
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts
from torch_graphs import graph_keeper

SAVED = {torch.ops.aten.mm.default, torch.ops._c10d_functional.reduce_scatter_tensor.default}


def policy(ctx: object, func: object, *args: object, **kwargs: object) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if func in SAVED else CheckpointPolicy.PREFER_RECOMPUTE


def main() -> None:
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    group = dist.group.WORLD

    def block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        gathered = fc.all_gather_tensor(torch.nn.functional.rms_norm(x, (x.shape[-1],)), 0, group)
        return fc.reduce_scatter_tensor(torch.relu(gathered @ w1) @ w2, "sum", 0, group)

    def step(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        context = functools.partial(create_selective_checkpoint_contexts, policy)
        return checkpoint(block, x, w1, w2, use_reentrant=False, context_fn=context).sum()

    graphs: dict[str, torch.fx.GraphModule] = {}

    keep = graph_keeper(graphs)

    partition = functools.partial(min_cut_rematerialization_partition, compiler="inductor")
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"), partition_fn=partition,
                           decompositions=select_decomp_table())
    compiled = torch.compile(step, backend=backend, fullgraph=True)
    x = torch.randn(8, 16, requires_grad=True)
    w1, w2 = torch.randn(16, 32, requires_grad=True), torch.randn(32, 16, requires_grad=True)
    compiled(x, w1, w2).backward()
    for name in ("forward", "backward"):
        ops = [str(node.target) for node in graphs[name].graph.nodes if node.op == "call_function"]
        shown = [op.split(".")[1] for op in ops if ("c10d" in op and "wait" not in op) or op == "aten.mm.default"]
        print(f"{name:8s} {', '.join(shown)}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
