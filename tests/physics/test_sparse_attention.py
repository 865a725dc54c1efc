"""DeepSeek Sparse Attention (physics/sparse_attention.py and where training and serving use it).

Every expected value is worked out by hand in the test from the model's sizes and the constants' definitions
(DeepSeek-V3.2-Exp report Sec. 1-2; FlashMLA's README; Megatron-Core dsa.py), not read back from the code.
"""

from __future__ import annotations

import numpy as np
import pytest
from round_specs import round_hw  # noqa: E402

from planner.engines.load import load_model
from planner.errors import PlannerError
from planner.physics import sparse_attention as dsa
from planner.physics.params import attention_params, count_params, indexer_params, kv_cache_bytes_per_token
from planner.physics.shapes import attention_dims, kv_divisor
from planner.serving.estimate import InferenceArrays
from planner.serving.inputs import model_shapes
from planner.serving.time import Work, forward_pass, rates
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import estimate
from planner.training.flops import step_flop
from planner.training.memory import layer_activation_bytes_per_token
from planner.training.rules import check_layout, resolve_layout
from planner.training.time import sparse_attention_seconds, sparse_cp_comm_seconds


def mla_model(**sparse: int) -> ModelSpec:
    """A 2-layer MLA model (h 256, 4 heads; query latent 64, K/V latent 32, heads of 16 + 8 rotary, values 16)
    with an indexer of 2 heads of 8 keeping 16 keys when `sparse` says so."""
    fields: dict = dict(name="tiny MLA", num_layers=2, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512,
                        vocab_size=1000, max_seq_len=4096,
                        mla=dict(q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                                 v_head_dim=16))
    if sparse:
        fields["sparse_attention"] = dict(index_heads=sparse.get("heads", 2), index_head_dim=sparse.get("dim", 8),
                                          topk=sparse.get("topk", 16))
    return ModelSpec.model_validate(fields)


def test_the_indexer_weights_by_hand() -> None:
    """wq_b 64 x (2 x 8), wk 256 x 8, its LayerNorm 2 x 8, weights_proj 256 x 2: 1,024 + 2,048 + 16 + 512."""
    sparse, dense = mla_model(heads=2), mla_model()
    assert indexer_params(sparse) == 64 * 16 + 256 * 8 + 2 * 8 + 256 * 2 == 3_600
    assert attention_params(sparse) - attention_params(dense) == 3_600
    assert count_params(sparse).total - count_params(dense).total == 2 * 3_600


def test_catalog_models_count_what_transformers_counts() -> None:
    """transformers 5.25.0 (meta device) counts DeepSeek-V3.2 at 671,877,929,216 parameters and GLM-5 at
    743,911,199,232, the routers' correction biases being buffers there (58 and 75 MoE layers x 256 experts), which
    planner counts as weights."""
    assert count_params(load_model("deepseek-v3.2").spec).total == 671_877_929_216 + 58 * 256
    assert count_params(load_model("glm-5").spec).total == 743_911_199_232 + 75 * 256
    # the indexer of DeepSeek-V3.2: 1536 x 64 x 128 + 7168 x 128 + 2 x 128 + 7168 x 64 per layer
    assert indexer_params(load_model("deepseek-v3.2").spec) == 12_582_912 + 917_504 + 256 + 458_752


def test_the_mqa_form_widths() -> None:
    """Each query head is kv_lora + rope = 40 wide after absorption, the key the one shared 40-wide latent (whole
    on every TP rank), V no tensor of its own, each head's output kv_lora = 32 wide."""
    widths = attention_dims(mla_model(heads=2))
    assert (widths.query, widths.key, widths.value, widths.output) == (4 * 40, 40, 0, 4 * 32)
    assert kv_divisor(mla_model(heads=2), np.array([4])).tolist() == [1]


@pytest.mark.parametrize(("s", "pairs"), [
    (8, 8 * 9 // 2),  # under top-k every query keeps all its keys: the causal count
    (16, 16 * 17 // 2),
    (64, 16 * 17 // 2 + (64 - 16) * 16),  # beyond: 16 keys per query after the first 16 queries
])
def test_selected_pairs_are_a_window_of_top_k(s: int, pairs: int) -> None:
    model = mla_model(topk=16)
    assert float(dsa.selected_pairs(model, np.array(s))) == pairs
    assert float(dsa.selected_share(model, np.array(s))) == pytest.approx(pairs / (s * (s + 1) / 2))


def test_training_core_seconds_by_hand() -> None:
    """One 64-token sequence, top-k 16, peak 1e15: the sparse MLA kernel computes 136 x 16 + 48 x 16 = 904 pairs of
    2 x 4 heads x (40 + 32) FLOPs over tp at 0.645 x 0.90 of the peak, the indexer 64 x 65 / 2 = 2,080 pairs of
    2 x 2 x 8 on every rank at 0.40 of it, the target 904 pairs of 2 x 4 x 40 over tp, forward only; the backward is
    2.5x the kernel and, for the sparse indexer loss, 3x the indexer's products over the 904 selected pairs."""
    model = mla_model(topk=16)
    peak = 1e15
    fwd, bwd = dsa.training_core_seconds(model, tokens=np.array(64.0), seq_len=np.array(64.0), tp=np.array([1, 2]),
                                         peak16=peak)
    eff = 0.645 * dsa.DENSE_FLASH_COMBINED_TO_FORWARD
    core = 904 * 2 * 4 * 72 / peak / eff
    indexer = 2080 * 32 / peak / 0.40
    target = 904 * 2 * 4 * 40 / peak / eff
    assert fwd.tolist() == pytest.approx([core + indexer + target, core / 2 + indexer + target / 2])
    indexer_selected = 904 * 32 / peak / 0.40
    assert bwd.tolist() == pytest.approx([2.5 * core + 3 * indexer_selected, 2.5 * core / 2 + 3 * indexer_selected])
    assert dsa.DENSE_FLASH_COMBINED_TO_FORWARD == pytest.approx(3.5 / (1 / 648 + 2.5 / 561) / 648)


def test_the_indexer_does_not_shrink_with_tensor_parallelism() -> None:
    """Megatron-Core replicates the indexer on every TP rank: at a long sequence, where it dominates, doubling tp
    cannot halve the sparse attention's time; the TP all-reduce of the fp32 target over the selected pairs is
    charged only with tp > 1."""
    model = mla_model(heads=64, dim=128, topk=16)
    hw = round_hw()
    one = resolve_layout(model, 1, global_batch=1, seq_len=4096)
    two = resolve_layout(model, 2, tp=2, global_batch=1, seq_len=4096)
    f1, _ = sparse_attention_seconds(model, hw, one.to_arrays())
    f2, _ = sparse_attention_seconds(model, hw, two.to_arrays())
    assert float(f2[0]) > 0.5 * float(f1[0])
    assert float(dsa.target_bytes(model, tokens=np.array(4096.0), seq_len=np.array(4096.0))) == (
        (16 * 17 / 2 + (4096 - 16) * 16) * 4)


def test_step_flop_counts_the_indexer_and_the_target() -> None:
    """Model FLOPs count the attention's math, in the MHA form's widths: per token of a 64-token sequence, both
    layers, the core 2 x 64 x 4 x (24 + 16) scaled by the share of pairs kept, three times with its backward; the
    indexer's forward 64 x (2 x 2 x 8) over every pair, its sparse loss's backward twice that over the kept share;
    the target 64 x 2 x 4 x 24 x share, once (detached); the indexer's projections forward and weight gradient
    only (2 x 2 FLOPs per weight: its input is detached)."""
    sparse, dense = mla_model(topk=16), mla_model()
    layout = resolve_layout(sparse, 1, global_batch=1, seq_len=64).to_arrays()
    share = 904 / (64 * 65 / 2)
    core = 3 * 2 * 64 * 4 * (24 + 16)
    indexer = 64 * 32 * (1 + 2 * share)
    per_token = 2 * (indexer + 64 * 2 * 4 * 24 * share + core * (share - 1))
    extra_weights = 2 * 2 * 2 * indexer_params(sparse)
    got = float(step_flop(sparse, layout).model_flop[0]) - float(step_flop(dense, layout).model_flop[0])
    assert got == pytest.approx(64 * (per_token + extra_weights))


def test_activations_keep_the_indexer_and_the_top_k_list() -> None:
    """Beyond the core's Q, K and O: per token the indexer's 2 x 8 queries, its key 8 and 2 weights (16-bit) and
    min(top-k, s) int32 indices, whole on every rank; raising top-k from 16 to 32 at s 64 adds 16 x 4 bytes."""
    small, large = mla_model(topk=16), mla_model(topk=32)
    layout = resolve_layout(small, 2, tp=2, global_batch=1, seq_len=64).to_arrays()
    a = layer_activation_bytes_per_token(small, layout, moe_layer=False).full
    b = layer_activation_bytes_per_token(large, layout, moe_layer=False).full
    assert float(b[0] - a[0]) == 16 * 4


def test_layouts_planner_does_not_time_are_refused() -> None:
    model = mla_model(topk=16)
    with pytest.raises(PlannerError, match="fp8_attention false"):
        check_layout(model, Layout(dtype="fp8", fp8_attention=True, global_batch=2, seq_len=64), 1)
    with pytest.raises(PlannerError, match="use flash attention"):
        check_layout(model, Layout(flash_attention=False, global_batch=2, seq_len=64), 1)
    with pytest.raises(PlannerError, match="has no DeepSeek Sparse Attention"):
        check_layout(model, Layout(global_batch=2, seq_len=64, engine="torchtitan"), 1)
    with pytest.raises(ValueError, match="q_lora_rank"):
        ModelSpec.model_validate({**mla_model().model_dump(), "mla": {**mla_model().model_dump()["mla"],
                                                                        "q_lora_rank": None},
                                  "sparse_attention": {"index_heads": 2, "index_head_dim": 8, "topk": 16}})


@pytest.mark.parametrize(("seq_len", "sparse_faster"), [(4096, False), (32768, True)])
def test_sparse_attention_pays_off_only_at_long_sequences(seq_len: int, sparse_faster: bool) -> None:
    """At 4,096 tokens each query keeps half its keys but each pair costs the MQA form's 2 x 128 x (576 + 512)
    against the dense MHA form's 2 x 128 x (192 + 128), 3.4x, and the indexer scores every pair: DeepSeek-V3.2
    steps slower than DeepSeek-V3 on the same layout (why the report simulates DSA with masked MHA on short
    prefills, Sec. 3). At 32,768 tokens a query keeps 2,048 of about 16,000 keys and V3.2 is the faster."""
    hw = round_hw(memory_bytes=10**13)
    steps = []
    for name in ("deepseek-v3.2", "deepseek-v3"):
        model = load_model(name).spec
        layout = resolve_layout(model, 256, ep=32, zero=3, recompute="full", global_batch=256, seq_len=seq_len)
        steps.append(estimate(model, hw, layout).scalar("step_seconds"))
    assert (steps[0] < steps[1]) == sparse_faster


def test_serving_caches_the_indexer_keys_and_decodes_top_k() -> None:
    """KV per token, DeepSeek-V3.2 in bf16: 61 layers x ((512 + 64) x 2 bytes + the indexer's 128 fp8 + 4) =
    78,324 bytes. A decode at 64K of context reads the latent of 2,048 keys per layer (plus half a page) and the
    indexer key of every token."""
    model = load_model("deepseek-v3.2").spec
    assert kv_cache_bytes_per_token(model, "bf16") == 61 * ((512 + 64) * 2 + 132) == 78_324
    dense = load_model("deepseek-v3").spec
    hw = round_hw(memory_bytes=10**12)
    x = InferenceArrays.build(tp=8, input_len=65536, output_len=16)
    r = rates(hw, x)
    zero = np.zeros(1)
    work = Work(np.ones(1), np.ones(1), zero, np.array([65536.0]), np.ones(1), np.array([65536.0]))
    sparse_pass = forward_pass(model_shapes(model), hw, x, r, work)
    dense_pass = forward_pass(model_shapes(dense), hw, x, r, work)
    page = 16 / 2  # KV_PAGE_TOKENS / 2 per layer
    latent = 61 * (2048 + page) * (512 + 64) * 2
    index = 61 * (65536 + page) * 132
    assert float(sparse_pass.kv_bytes_read[0]) == pytest.approx(latent + index)
    assert float(sparse_pass.attention_seconds[0]) < float(dense_pass.attention_seconds[0])


def test_context_parallelism_splits_the_work_and_gathers_the_keys() -> None:
    """Megatron-Core's all-gather CP for DSA: with the sequence balanced over cp ranks each rank does 1/cp of the
    selected pairs and of the indexer's pairs; it gathers every rank's latent and indexer keys, (32 + 8 + 8) x 2
    bytes per token, and keeps the other ranks' cp - 1 chunks for the backward."""
    model = mla_model(topk=16)
    hw = round_hw()
    one = resolve_layout(model, 1, global_batch=1, seq_len=1024).to_arrays()
    two = resolve_layout(model, 2, cp=2, global_batch=1, seq_len=1024).to_arrays()
    f1, b1 = sparse_attention_seconds(model, hw, one)
    f2, b2 = sparse_attention_seconds(model, hw, two)
    assert float(f2[0]) == pytest.approx(float(f1[0]) / 2) and float(b2[0]) == pytest.approx(float(b1[0]) / 2)
    assert float(sparse_cp_comm_seconds(model, hw, one)[0]) == 0.0
    assert float(sparse_cp_comm_seconds(model, hw, two)[0]) > 0.0
    # the backward reduce-scatters only (the gathered keys are kept): full recompute adds one forward gather
    full = resolve_layout(model, 2, cp=2, recompute="full", global_batch=1, seq_len=1024).to_arrays()
    assert float(sparse_cp_comm_seconds(model, hw, full)[0]) > float(sparse_cp_comm_seconds(model, hw, two)[0])
    a1 = layer_activation_bytes_per_token(model, one, moe_layer=False).full
    a2 = layer_activation_bytes_per_token(model, two, moe_layer=False).full
    assert float(a2[0] - a1[0]) == (32 + 8 + 8) * 2


def test_the_power_limit_slows_the_sparse_kernels() -> None:
    """The 500 W H100 (compute_fraction below 1) runs every compute-bound kernel slower, DSA's too."""
    from planner.engines.load import load_hardware
    from planner.physics.kernels import compute_fraction

    model = mla_model(topk=16)
    full_power, limited = load_hardware("h100-sxm").spec, load_hardware("h100-sxm-96gb").spec
    assert compute_fraction(limited) < compute_fraction(full_power) == 1.0
    layout = resolve_layout(model, 1, global_batch=1, seq_len=4096).to_arrays()
    f_full, _ = sparse_attention_seconds(model, full_power, layout)
    f_limited, _ = sparse_attention_seconds(model, limited, layout)
    assert float(f_limited[0]) == pytest.approx(float(f_full[0]) / compute_fraction(limited))


def test_sequence_parallelism_gathers_the_indexer_inputs() -> None:
    """Under SP every TP rank all-gathers the hidden state (256) and the query latent (64) of the whole sequence for
    its indexer: one all-gather of 1,024 tokens x 320 x 2 bytes per layer and micro-batch in the forward, beyond what
    the same MLA model without an indexer moves over TP."""
    from planner.physics.comm import all_gather_seconds, group_link
    from planner.training.time import layer_time

    hw = round_hw()
    sparse, dense = mla_model(topk=16), mla_model()
    layout = resolve_layout(sparse, 2, tp=2, sequence_parallel=True, global_batch=1, seq_len=1024).to_arrays()
    extra = layer_time(sparse, hw, layout, moe_layer=False).tp_comm - layer_time(dense, hw, layout,
                                                                                   moe_layer=False).tp_comm
    expected = all_gather_seconds(1024 * (256 + 64) * 2, layout.tp, group_link(hw, layout.tp, 1))
    assert float(extra[0]) == pytest.approx(float(expected[0]))
