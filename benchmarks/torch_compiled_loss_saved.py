"""What torch.compile keeps for the backward of torchtitan's loss, cross_entropy(pred.flatten(0, 1).float(), labels)
(torchtitan/components/loss.py @ 820504e, compiled under --training.compile; [compile] components 'loss' later).

Usage: python benchmarks/torch_compiled_loss_saved.py   (needs torch; no GPU and no C++ compiler: the graphs are
traced and partitioned, not run through Inductor's code generation)

The loss is traced by AOTAutograd with Inductor's decomposition table and partitioned by the min-cut partitioner
Inductor uses (compiler="inductor"); the forward graph's outputs beyond the loss are what the backward keeps. Prints
them with their shapes and dtypes and the bytes they hold per logit, then the backward graph. planner's torchtitan
profile takes the result as kernels.compiled_loss_bytes_per_logit (planner/specs/engine.py): the kept bf16 logits
(2 bytes) and the bf16 gradient the backward writes (2), where the eager loss keeps 12 (torch_loss_peak.py).
"""

from __future__ import annotations

import functools

import torch
from torch._functorch.aot_autograd import aot_function
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch._inductor.decomposition import select_decomp_table
from torch_graphs import graph_keeper

TOKENS, VOCAB = 256, 4096


def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))


def main() -> None:
    graphs: dict[str, torch.fx.GraphModule] = {}

    keep = graph_keeper(graphs)

    partition = functools.partial(min_cut_rematerialization_partition, compiler="inductor")
    compiled = aot_function(loss_fn, fw_compiler=keep("forward"), bw_compiler=keep("backward"),
                            partition_fn=partition, decompositions=select_decomp_table())
    pred = torch.randn(2, TOKENS // 2, VOCAB, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, VOCAB, (2, TOKENS // 2))
    compiled(pred, labels).backward()
    outputs = next(node for node in graphs["forward"].graph.nodes if node.op == "output").args[0]
    kept = 0
    print("kept for the backward (the forward graph's outputs after the loss):")
    for node in outputs[1:]:
        value = node.meta["val"]
        size = value.numel() * value.element_size()
        kept += size
        print(f"  {node.name:28s} {tuple(value.shape)!s:22s} {str(value.dtype):16s} {size:>10,} bytes")
    print(f"{kept / (TOKENS * VOCAB):.3f} bytes per logit kept (the logits {TOKENS} x {VOCAB})")
    print(graphs["backward"].code)


if __name__ == "__main__":
    main()
