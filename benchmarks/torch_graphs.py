"""Keep the forward and backward graphs AOTAutograd hands its compilers, for the scripts that read what torch.compile
saves or replays (benchmarks/torch_compiled_loss_saved.py, benchmarks/torch_sac_collectives.py; they need torch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def graph_keeper(graphs: dict[str, Any]) -> Callable[[str], Callable[[Any, object], Any]]:
    """keep(name): a compiler that stores the graph module it is given under `name` in `graphs` and runs it as is."""

    def keep(name: str) -> Callable[[Any, object], Any]:
        def compiler(gm: Any, _inputs: object) -> Any:
            graphs[name] = gm
            return gm
        return compiler

    return keep
