"""`planner search` for DeepSeek-V3 on the cluster of its technical report (issue 16's done-when).

DeepSeek-AI, "DeepSeek-V3 Technical Report" (arXiv:2412.19437), Sec. 3.1-3.2 and 4.2: 2,048 H800 GPUs in
nodes of 8 (NVLink inside a node, InfiniBand across), FP8 training, batch 15,360 sequences of 4,096 tokens
at the end of its schedule; parallelism: 16-way pipeline (DualPipe), 64-way expert parallelism spanning 8
nodes, ZeRO-1 data parallelism, no tensor parallelism.
"""

from __future__ import annotations

import json

import pytest

from planner.engines.load import load_hardware
from planner.specs.engine import engine_profile

COMMAND = ("search", "--model", "deepseek-v3", "--hardware", "h800", "--gpus", "2048", "--global-batch", "15360",
           "--seq-len", "4096", "--dtype", "fp8")
GPUS_PER_NODE = load_hardware("h800").spec.node.gpus_per_node  # 8 (DeepSeek-V3 report, Sec. 3.1)


@pytest.fixture(scope="module")
def doc():
    from click.testing import CliRunner

    from planner.cli import cli

    result = CliRunner().invoke(cli, [*COMMAND, "--format", "json", "--top", "5"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_report_cluster_runs_and_says_what_moe_settings_it_assumed(doc, run_cli):
    assert GPUS_PER_NODE == 8
    assert doc["feasible"] > 0 and len(doc["candidates"]) == 5
    # the engine's two-tier dispatcher (megatron runs DeepEP; H800 nodes are 8-GPU NVLink domains) and its
    # default of no all-to-all overlap
    moe = engine_profile("megatron").moe
    assert "deepep" in moe.dispatchers and not moe.default_ep_overlap
    assert doc["moe"] == {"dispatcher": "deepep", "ep_overlap": False,
                          "assumed": "deepep token dispatcher, expert all-to-all not overlapped"}
    for cand in doc["candidates"]:
        cfg = cand["config"]
        assert cfg["tp"] * cfg["pp"] * cfg["cp"] * cfg["dp"] == 2048 and cfg["dtype"] == "fp8"
        assert 256 % cfg["ep"] == 0
    # the report's own layout is in the space (tp 1, pp 16, ep 64, ZeRO-1) and passes the rules
    own = run_cli(*COMMAND, "--format", "json", "--tp", "1", "--pp", "16", "--ep", "64", "--zero", "1", "--top", "1")
    assert own.exit_code == 0, own.output
    assert json.loads(own.stdout)["costed"] > 0
    table = run_cli(*COMMAND, "--top", "3")
    assert "expert all-to-all not overlapped" in table.stdout.split("\n")[0]


def _spreads_experts_across_nodes_with_a_pipeline(best: dict) -> None:
    etp = best["etp"] if best["etp"] is not None else best["tp"]
    assert best["ep"] * etp > GPUS_PER_NODE, best  # Megatron keeps the etp x ep ranks adjacent: ep * etp GPUs
    assert best["pp"] > 1, best
    assert best["zero"] < 3, best


# issue 16's done-when: with no MoE setting given, the search assumes the engine's two-tier dispatcher
# (search_dispatcher: DeepEP on H800) and ranks EP across nodes with a pipeline first, not tp x ep 4 with ZeRO-3.
def test_the_winner_spreads_experts_across_nodes_with_a_pipeline_and_no_zero3(doc):
    _spreads_experts_across_nodes_with_a_pipeline(doc["candidates"][0]["config"])


def test_with_deepseeks_dispatch_and_overlap_the_winner_spreads_experts_across_nodes(run_cli):
    # The report's own setting: its all-to-all kernels send a token once per remote node and forward it over
    # NVLink (DeepEP), and DualPipe hides dispatch and combine behind another micro-batch's compute (Sec. 3.2).
    out = run_cli(*COMMAND, "--moe-dispatcher", "deepep", "--moe-ep-overlap", "--format", "json", "--top", "1")
    doc = json.loads(out.stdout)
    assert doc["moe"]["dispatcher"] == "deepep" and doc["moe"]["ep_overlap"] is True
    _spreads_experts_across_nodes_with_a_pipeline(doc["candidates"][0]["config"])


def test_with_dualpipe_and_deepep_the_winner_spreads_experts_across_nodes(run_cli):
    # DeepSeek-V3's schedule (DualPipe, Sec. 3.2.1), which hides the expert all-to-all itself
    out = run_cli(*COMMAND, "--moe-dispatcher", "deepep", "--schedule", "dualpipe", "--format", "json", "--top", "1")
    doc = json.loads(out.stdout)
    assert doc["moe"]["assumed"] == "deepep token dispatcher, expert all-to-all overlapped with compute by the " \
        "dualpipe schedule, the experts' weight gradients after the dispatch's backward"
    best = doc["candidates"][0]["config"]
    assert best["schedule"] == "dualpipe" and best["pp"] % 2 == 0
    _spreads_experts_across_nodes_with_a_pipeline(best)
