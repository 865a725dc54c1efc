"""Bytes per logit live at the peak of PyTorch's eager loss path as torchtitan runs it (9dec370 train.py:
cross_entropy(pred.flatten(0, 1).float(), labels), `del pred` before backward).

Usage: python benchmarks/torch_loss_peak.py   (needs torch; CPU is enough: the allocation pattern of the
aten kernels does not depend on the device)

Every tensor storage an aten op creates is tracked until it is freed (a dispatch mode with weak-reference
finalisers), through the LM head's matmul, the upcast, the loss and its backward; the peak of the live bytes
is divided by the number of logits. The LM head's own inputs are kept small so that the logits dominate.
planner's torchtitan profile takes the result as kernels.loss_bytes_per_logit (planner/specs/engine.py).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Live bytes of the storages aten ops create, and their peak (with the op that reached it)."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = 0
        self.peak = 0
        self.peak_op = ""
        self._op = ""

    def _track(self, tensor: object) -> None:
        if not isinstance(tensor, torch.Tensor):
            return
        storage = tensor.untyped_storage()
        key, size = storage.data_ptr(), storage.nbytes()
        if size == 0 or key in self.live:
            return
        self.live[key] = size
        self.current += size
        weakref.finalize(storage, self._free, key)
        if self.current > self.peak:
            self.peak, self.peak_op = self.current, self._op

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self._op = str(func)
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            self._track(tensor)
        return out


def main() -> None:
    tokens, vocab, hidden = 2048, 32000, 64
    h = torch.randn(tokens, hidden, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    logits = tokens * vocab
    mode = LiveBytes()
    with mode:
        pred = h @ w.t()
        loss = torch.nn.functional.cross_entropy(pred.float(), labels)
        forward = mode.peak
        del pred
        mode.peak = mode.current
        loss.backward()
    print(f"torch {torch.__version__}: forward peak {forward / logits:.2f} bytes per logit; "
          f"backward peak {mode.peak / logits:.2f} at {mode.peak_op}")


if __name__ == "__main__":
    main()
