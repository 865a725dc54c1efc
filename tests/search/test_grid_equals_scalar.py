"""The search's broadcast grid (one axis per group of layout fields, costed in chunks) gives, for every candidate,
exactly what `estimate()` gives for that candidate as a single Layout: random models (dense MHA, GQA, MoE with
leading dense layers, MLA, sliding window, Gated DeltaNet hybrids), random problems (with the MoE settings and optimizer-state
precision and the pipeline schedule of a search), and on MoE models always some candidates with expert TP other than tp (parallel folding).

The grid and the scalar path share every formula, but not the broadcasting, the chunking, the stage picking
or the candidate -> Layout round trip; those are what this property guards.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.engines.load import load_hardware
from planner.errors import PlannerError
from planner.search.engine import run_search
from planner.search.space import Problem
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate

HW = load_hardware("h100-sxm").spec
BLACKWELL = load_hardware("gb200-nvl72").spec  # NVFP4 (dtype fp4) needs fp4 tensor cores


@st.composite
def models(draw: st.DrawFn) -> ModelSpec:
    kind = draw(st.sampled_from(["mha", "gqa", "moe", "mla", "window", "dsa", "gdn"]))
    heads = draw(st.sampled_from([8, 16, 32]))
    head_dim = draw(st.sampled_from([64, 128]))
    layers = draw(st.integers(4, 24))
    spec: dict = {
        "name": f"random-{kind}",
        "source": "hypothesis",
        "hidden_size": heads * head_dim,
        "num_layers": layers,
        "num_attention_heads": heads,
        "ffn_hidden_size": draw(st.sampled_from([2, 3, 4])) * heads * head_dim,
        "vocab_size": draw(st.sampled_from([32000, 50304, 128256])),
        "max_seq_len": 8192,
        "mlp_kind": "gated" if kind != "mha" else "standard",
    }
    if kind in ("gqa", "moe", "window", "gdn"):
        spec["num_kv_heads"] = draw(st.sampled_from([1, 2, 4, 8]))
    if kind == "window":
        spec["sliding_window_tokens"] = 1024
        spec["sliding_window_layers"] = layers // 2
    if kind == "moe":
        spec["moe"] = {
            "num_experts": draw(st.sampled_from([8, 16])),
            "experts_per_token": 2,
            "moe_ffn_hidden_size": heads * head_dim,
            "num_shared_experts": draw(st.integers(0, 1)),
            "num_dense_layers": draw(st.integers(0, 2)),
        }
    if kind == "gdn":  # Gated DeltaNet layers between every k-th attention layer (Qwen3.5), MoE or dense
        spec["linear_attention"] = {"num_key_heads": draw(st.sampled_from([4, 8])), "num_value_heads": 16,
                                    "key_head_dim": 64, "value_head_dim": 64, "conv_kernel": 4,
                                    "full_attention_interval": draw(st.sampled_from([2, 3, 4]))}
        spec["attention_output_gate"] = draw(st.booleans())
        if draw(st.booleans()):
            spec["moe"] = {"num_experts": 8, "experts_per_token": 2, "moe_ffn_hidden_size": heads * head_dim,
                           "num_shared_experts": 1, "num_dense_layers": draw(st.integers(0, 2))}
    if kind in ("mla", "dsa"):
        spec["mla"] = {"q_lora_rank": 256, "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32,
                       "v_head_dim": 64}
    if kind == "dsa":  # DeepSeek Sparse Attention over the MLA above, keeping fewer keys than the sequences hold
        spec["sparse_attention"] = {"index_heads": draw(st.sampled_from([4, 16])), "index_head_dim": 64,
                                    "topk": draw(st.sampled_from([256, 1024]))}
    return ModelSpec.model_validate(spec)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=models(), gpus=st.sampled_from([8, 16, 32, 64]), batch_per_gpu=st.sampled_from([1, 2, 4]),
       seq_len=st.sampled_from([1024, 2048, 4096]), pick=st.randoms(use_true_random=False),
       dispatcher=st.sampled_from(["alltoall", "allgather", "deepep", "hybridep"]), ep_overlap=st.booleans(),
       moments=st.sampled_from(["fp32", "bf16"]), schedule=st.sampled_from(["1f1b", "gpipe"]),
       kernel=st.sampled_from([None, "fused", "flash2"]),
       recipe=st.sampled_from([None, "tensorwise", "delayed", "blockwise", "nvfp4"]),
       muon=st.sampled_from([None, "duplicated", "blockwise", "distributed"]),
       lora=st.sampled_from([None, (8, "all_linear"), (16, "attention"), (4, "qkv")]))
def test_every_grid_candidate_equals_its_scalar_estimate(model, gpus, batch_per_gpu, seq_len, pick, dispatcher,
                                                        ep_overlap, moments, schedule, kernel, recipe, muon, lora):
    # recipe None: bf16; nvfp4: dtype fp4 on a Blackwell rack; else fp8 under that recipe
    precision = ({} if recipe is None else {"dtype": "fp4"} if recipe == "nvfp4"
                 else {"dtype": "fp8", "fp8_recipe": recipe})
    hw = BLACKWELL if recipe == "nvfp4" else HW
    # muon: the optimizer under that TP mode (its states fp32: the bf16 moments are Adam's)
    optimizer = {} if muon is None else {"optimizer": "muon", "muon_tp_mode": muon}
    if muon is not None:
        moments = "fp32"
        lora = None  # no engine runs Muon on LoRA's adapters
    adapters = {} if lora is None else {"lora_rank": lora[0], "lora_targets": lora[1]}
    problem = Problem(gpus=gpus, global_batch=gpus * batch_per_gpu, seq_len=seq_len, moe_dispatcher=dispatcher,
                      moe_ep_overlap=ep_overlap, optimizer_state_dtype=moments, schedule=schedule,
                      attention_kernel=kernel, **precision, **optimizer, **adapters)
    try:
        result = run_search(model, hw, problem, chunk=64)  # small chunks: several chunks per search
    except PlannerError:
        return  # no layout of this problem passes the rules; nothing to compare
    n = result.layouts.size
    folded = np.flatnonzero(result.layouts.etp != result.layouts.tp).tolist()
    if model.moe is not None:
        assert folded, "a MoE search offers etp 1 beside tp > 1"
    chosen = set(pick.sample(range(n), min(n, 12))) | set(pick.sample(folded, min(len(folded), 6)))
    for pos in sorted(chosen):
        layout = result.layout(pos)
        # the problem's dispatcher where tokens leave the rank (ep > 1), Layout's default where they do not
        assert layout.expert_tp == int(result.layouts.etp[pos])
        assert layout.moe_dispatcher == (dispatcher if layout.ep > 1 else "alltoall")
        assert layout.moe_ep_overlap == ep_overlap and layout.optimizer_state_dtype == moments
        assert layout.schedule == schedule
        assert (layout.optimizer, layout.muon_tp_mode) == (("adam", "duplicated") if muon is None else ("muon", muon))
        assert (layout.lora_rank, layout.lora_targets) == ((None, "all_linear") if lora is None else lora)
        assert (layout.dtype, layout.fp8_recipe) == (("bf16", "tensorwise") if recipe is None else
                                                     ("fp4", "tensorwise") if recipe == "nvfp4" else ("fp8", recipe))
        # the problem's kernel, read back as null where it is the engine's own (megatron: fused)
        assert layout.attention_kernel == (None if kernel in (None, "fused") else kernel)
        one = estimate(model, hw, layout)
        r = result.results
        assert float(r.step_seconds[pos]) == one.scalar("step_seconds"), layout
        peak = one.stages[one.peak_stage].total_bytes
        assert np.isclose(float(r.peak_bytes[pos]), peak, rtol=1e-12, atol=0), layout
        assert bool(r.fits[pos]) == one.fits


def test_dualpipe_candidates_equal_their_scalar_estimate():
    model = ModelSpec(name="small", source="hand-made", num_layers=4, hidden_size=512, num_attention_heads=8,
                      ffn_hidden_size=1024, mlp_kind="standard", vocab_size=32000, max_seq_len=8192)
    result = run_search(model, HW, Problem(gpus=8, global_batch=8, seq_len=1024, schedule="dualpipe"))
    for pos in range(result.layouts.size):
        one = estimate(model, HW, result.layout(pos))
        assert float(result.results.step_seconds[pos]) == one.scalar("step_seconds")
        # the heaviest rank of all, not only of the stages evaluate() looks at
        assert float(result.results.peak_bytes[pos]) == pytest.approx(max(s.total_bytes for s in one.stages), rel=1e-12)
