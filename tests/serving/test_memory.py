"""Serving memory: KV cache, weights per GPU, activations, reserve, fits and max_concurrency.

Expected values are worked out by hand in the comments, from the model shapes alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from round_specs import round_hw  # noqa: E402

from planner.engines.load import load_hardware, load_model
from planner.physics.params import count_params, kv_cache_bytes_per_token
from planner.serving.estimate import InferenceArrays, estimate_inference
from planner.serving.inputs import INT4_GROUP_SIZE, model_shapes
from planner.serving.memory import (
    COMM_BUFFER_BYTES,
    inference_memory,
    kv_bytes_per_sequence_per_gpu,
    memory_total_bytes,
)
from planner.specs.model import ModelSpec


def round_hw_serving(memory_bytes: int = 80 * 10**9):
    """The round profile with a 0.8 node-fabric efficiency."""
    return round_hw(memory_bytes=memory_bytes, intra_node_fraction=0.8)


def llama2_70b() -> ModelSpec:
    return ModelSpec(name="Llama-2-70B", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                     ffn_hidden_size=28672, vocab_size=32000, max_seq_len=4096)


def llama31_70b() -> ModelSpec:
    return ModelSpec(name="Llama-3.1-70B", num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                     ffn_hidden_size=28672, vocab_size=128256, max_seq_len=131072)


def deepseek_v3() -> ModelSpec:
    return ModelSpec.model_validate(dict(
        name="DeepSeek-V3", num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432,
        vocab_size=129280, max_seq_len=163840,
        moe=dict(num_experts=256, experts_per_token=8, moe_ffn_hidden_size=2048, num_shared_experts=1,
                 num_dense_layers=3, router_bias=True),
        mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    ))


def arrays(**kw: object) -> InferenceArrays:
    kw.setdefault("input_len", 1000)
    kw.setdefault("output_len", 200)
    return InferenceArrays.build(**kw)  # type: ignore[arg-type]


# --- KV cache bytes per token -------------------------------------------------------------------


def test_kv_bytes_per_token_llama31_70b_exact() -> None:
    # 2 (K and V) x 80 layers x 8 KV heads x 128 head_dim x 2 bytes = 327,680; fp8 halves it.
    model = llama31_70b()
    assert kv_cache_bytes_per_token(model, "bf16") == 327_680
    assert kv_cache_bytes_per_token(model, "fp8") == 163_840
    mem = inference_memory(model, round_hw_serving(), arrays(kv_dtype=np.array(["bf16", "fp8"])))
    assert mem.kv_cache_bytes_per_token.tolist() == [327_680, 163_840]


def test_kv_bytes_per_token_deepseek_v3_latent() -> None:
    # MLA caches the 512-wide latent c_KV and the 64-wide shared rotary key per layer:
    # 61 layers x (512 + 64) x 2 bytes = 70,272 bytes per token, for all 128 heads together.
    model = deepseek_v3()
    assert kv_cache_bytes_per_token(model, "bf16") == 61 * (512 + 64) * 2 == 70_272
    mem = inference_memory(model, round_hw_serving(10**12), arrays(tp=8))
    assert float(mem.kv_cache_bytes_per_token) == 70_272


def test_kv_cache_per_gpu_split_over_tp_and_pp() -> None:
    # Llama-2-70B, 1,200 tokens cached per sequence, 4 sequences, bf16:
    # whole model 327,680 x 1,200 x 4 = 1,572,864,000 bytes; tp 4 and pp 2 leave 1/8 on each GPU.
    model = llama2_70b()
    mem = inference_memory(model, round_hw_serving(), arrays(tp=4, pp=2, concurrency=4))
    assert float(mem.kv_cache_bytes) == 1_572_864_000 / 8


def test_kv_heads_replicated_beyond_tp() -> None:
    # 8 KV heads: at tp 16 every GPU still keeps one whole head (two GPUs hold each), as at tp 8.
    model = ModelSpec(name="wide", num_layers=4, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
                      ffn_hidden_size=16384, vocab_size=1024, max_seq_len=4096)
    mem = inference_memory(model, round_hw_serving(), arrays(tp=np.array([8, 16]), concurrency=2))
    per_seq_per_gpu = 2 * 4 * 1 * 128 * 2 * 1200  # K,V x layers x 1 head x head_dim x bytes x tokens
    assert mem.kv_cache_bytes.tolist() == [2 * per_seq_per_gpu, 2 * per_seq_per_gpu]


def test_mla_latent_not_split_by_tp() -> None:
    # The latent is shared by every query head, so each TP rank keeps all of it.
    model = deepseek_v3()
    mem = inference_memory(model, round_hw_serving(10**13), arrays(tp=np.array([1, 8]), concurrency=3))
    expected = 3 * 1200 * 70_272
    assert mem.kv_cache_bytes.tolist() == [expected, expected]


def test_sliding_window_layers_cap_their_tokens() -> None:
    # 4 layers, 2 of them with a 100-token window; 300 cached tokens per sequence:
    # global layers keep 300, windowed ones 100 -> (2 x 300 + 2 x 100) tokens x 2 x 2 heads x 64 x 2 bytes.
    model = ModelSpec(name="swa", num_layers=4, hidden_size=256, num_attention_heads=4, num_kv_heads=2,
                      ffn_hidden_size=512, vocab_size=1000, max_seq_len=4096, sliding_window_tokens=100,
                      sliding_window_layers=2)
    mem = inference_memory(model, round_hw_serving(), arrays(input_len=250, output_len=50))
    per_token_layer = 2 * 2 * 64 * 2
    assert float(mem.kv_cache_bytes) == per_token_layer * (2 * 300 + 2 * 100)
    assert float(mem.kv_cache_bytes_per_sequence) == per_token_layer * 800
    # the per-token figure is the uncapped whole-model one
    assert float(mem.kv_cache_bytes_per_token) == per_token_layer * 4


# --- Weights ----------------------------------------------------------------------------------


def test_weights_one_gpu_bf16_equal_all_parameters() -> None:
    # Llama-2-7B has 6,738,415,616 parameters (HF model card / config arithmetic): 2 bytes each.
    model = load_model("llama-2-7b").spec
    mem = inference_memory(model, round_hw_serving(), arrays())
    assert float(mem.weights_bytes) == 2 * 6_738_415_616


def test_weights_tp8_llama2_70b_by_hand() -> None:
    # Per layer: q and o 2 x 8192^2, k and v 2 x 8192 x 1024, MLP 3 x 8192 x 28672; two 8192-wide norms.
    # tp 8 splits every matrix (one KV head of 128 per GPU); norms are replicated.
    matrices = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    layer = matrices // 8 * 2 + 2 * 8192 * 2
    embedding_and_head = (32000 * 8192 + 32000 * 8192 + 8192) * 2 / 8  # vocab-parallel, final norm included
    mem = inference_memory(llama2_70b(), round_hw_serving(), arrays(tp=8))
    assert float(mem.weights_bytes) == pytest.approx(80 * layer + embedding_and_head, rel=1e-12)


def test_weight_dtypes_scale_layer_matrices_only() -> None:
    model = llama2_70b()
    s = model_shapes(model)
    mem = inference_memory(model, round_hw_serving(), arrays(tp=8, weight_dtype=np.array(["bf16", "fp8", "int8", "int4"])))
    matrices = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) / 8
    fixed = 80 * 2 * 8192 * 2 + (s.embedding_params + s.head_params) * 2 / 8
    expected = [fixed + matrices * b for b in (2, 1, 1, 0.5 + 2 / INT4_GROUP_SIZE)]
    np.testing.assert_allclose(mem.weights_bytes, expected, rtol=1e-12)


def test_nvfp4_weights_carry_a_scale_byte_per_16() -> None:
    # Llama-2-70B at tp 8: the layers' matrices at 0.5 + 1/16 bytes (E2M1 values and an E4M3 scale per 16 weights),
    # norms, embedding and head 16-bit, as for the other weight dtypes
    model = llama2_70b()
    s = model_shapes(model)
    mem = inference_memory(model, round_hw_serving(), arrays(tp=8, weight_dtype="fp4"))
    matrices = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) / 8
    fixed = 80 * 2 * 8192 * 2 + (s.embedding_params + s.head_params) * 2 / 8
    assert float(mem.weights_bytes) == pytest.approx(fixed + matrices * 0.5625, rel=1e-12)


def test_pipeline_stages_hold_embedding_and_head() -> None:
    # pp 2: first stage = embedding + 40 layers, last = 40 layers + final norm + head.
    model = llama2_70b()
    s = model_shapes(model)
    mem = inference_memory(model, round_hw_serving(), arrays(pp=2))
    layer = (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192) * 2
    assert float(mem.stage_weights.first_bytes) == 40 * layer + s.embedding_params * 2
    assert float(mem.stage_weights.last_bytes) == 40 * layer + s.head_params * 2
    assert float(mem.weights_bytes) == float(mem.stage_weights.last_bytes)  # untied head is larger by a norm


def test_tied_head_is_one_table_on_one_stage_and_a_copy_on_the_last_of_several() -> None:
    # Regression: with tied embeddings (Gemma 2, GPT-2, Llama 3.2 1B/3B) the last stage of pp > 1 held
    # no output projection at all (the tied table counted on the first stage only).
    model = load_model("gemma-2-2b").spec
    assert model.tied_embeddings
    word = model.vocab_size * model.hidden_size * 2  # bytes, bf16
    s = model_shapes(model)
    one = inference_memory(model, round_hw_serving(), arrays(tp=np.array([1, 2])))
    np.testing.assert_allclose(one.weights_bytes, count_params(model).total * 2 / np.array([1, 2]), rtol=2e-3)
    two = inference_memory(model, round_hw_serving(), arrays(pp=2, tp=np.array([1, 2])))
    last, first = two.stage_weights.last_bytes, two.stage_weights.first_bytes
    np.testing.assert_allclose(last - (first - s.embedding_params * 2 / np.array([1, 2])),
                               (s.head_params * 2 + word) / np.array([1, 2]))
    assert np.all(last > first)  # 13 layers + the copy of the table outweigh 13 layers + the table


def test_moe_one_gpu_holds_every_expert() -> None:
    # One GPU, bf16: every parameter (all 256 routed experts of each MoE layer) at 2 bytes.
    model = deepseek_v3()
    mem = inference_memory(model, round_hw_serving(10**13), arrays())
    assert float(mem.weights_bytes) == 2 * count_params(model).total


# --- Reserve, activations, fits ------------------------------------------------------------------


def test_reserve_adds_comm_buffers_only_when_split() -> None:
    mem = inference_memory(llama2_70b(), round_hw_serving(), arrays(tp=np.array([1, 2]), pp=1))
    base = 512 * 2**20 + 256 * 2**20  # CUDA context + library workspaces (reserve.py)
    assert mem.other_bytes.tolist() == [base, base + COMM_BUFFER_BYTES]


def test_total_is_sum_and_fits_uses_headroom() -> None:
    model = llama2_70b()
    hw = round_hw_serving()
    mem = inference_memory(model, hw, arrays(tp=4, concurrency=8), headroom=0.1)
    total = mem.weights_bytes + mem.kv_cache_bytes + mem.activations_bytes + mem.other_bytes
    assert float(mem.total_bytes) == pytest.approx(float(total), rel=1e-15)
    assert float(mem.usable_bytes) == 0.9 * 80e9
    assert bool(mem.fits) == (float(mem.total_bytes) <= 0.9 * 80e9)


def test_activation_workspace_grows_until_chunk_then_only_logits() -> None:
    model = llama2_70b()
    hw = round_hw_serving()
    mem = inference_memory(model, hw, arrays(concurrency=np.array([1, 8, 16, 32]), input_len=1024, output_len=1))
    act = mem.activations_bytes
    # 1 and 8 sequences of 1,024 prompt tokens: 1,024 and 8,192 tokens in one pass; beyond that the pass is capped
    # at 8,192 tokens and only the fp32 logits (32,000 x 4 bytes per sequence) grow.
    assert act[2] - act[1] == pytest.approx(8 * 32000 * 4)
    assert act[3] - act[2] == pytest.approx(16 * 32000 * 4)
    assert act[1] > act[0]


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    s=st.integers(1, 3000),
    o=st.integers(1, 1000),
    wd=st.sampled_from(["bf16", "fp8", "int8", "int4"]),
    kd=st.sampled_from(["bf16", "fp8"]),
    gb=st.integers(20, 200),
    headroom=st.floats(0, 0.3),
)
def test_max_concurrency_fits_and_one_more_does_not(tp: int, pp: int, s: int, o: int, wd: str, kd: str, gb: int,
                                                    headroom: float) -> None:
    model = llama2_70b()
    hw = round_hw_serving(gb * 10**9)
    x = arrays(tp=tp, pp=pp, input_len=s, output_len=o, weight_dtype=wd, kv_dtype=kd)
    mem = inference_memory(model, hw, x, headroom=headroom)
    c = int(mem.max_concurrency)
    usable = hw.accelerator.memory_bytes * (1 - headroom)
    shapes = model_shapes(model)
    if c > 0:
        assert float(memory_total_bytes(shapes, x, np.array(c))) <= usable
        at_c = inference_memory(model, hw, x.with_concurrency(c), headroom=headroom)
        assert bool(at_c.fits)
    assert float(memory_total_bytes(shapes, x, np.array(c + 1))) > usable
    assert not bool(inference_memory(model, hw, x.with_concurrency(c + 1), headroom=headroom).fits)


@settings(max_examples=40, deadline=None)
@given(tp=st.sampled_from([1, 2, 8]), s=st.integers(1, 4000), c=st.integers(1, 5000), step=st.integers(1, 500))
def test_memory_monotone_in_concurrency(tp: int, s: int, c: int, step: int) -> None:
    model = llama2_70b()
    x = arrays(tp=tp, input_len=min(s, 4000), output_len=1, concurrency=np.array([c, c + step]))
    mem = inference_memory(model, round_hw_serving(), x)
    assert mem.total_bytes[1] >= mem.total_bytes[0]
    assert mem.kv_cache_bytes[1] > mem.kv_cache_bytes[0]


def test_catalog_llama31_70b_h100_max_concurrency_plausible() -> None:
    # 70B bf16 over 8 H100s: ~17.6 GB of weights per GPU leaves ~60 GB of KV: at 2,000 cached tokens per
    # sequence (327,680 x 2,000 / 8 = 82 MB per GPU) that is a few hundred sequences.
    model, hw = load_model("llama-3.1-70b").spec, load_hardware("h100-sxm").spec
    est = estimate_inference(model, hw, arrays(tp=8, input_len=1500, output_len=500))
    assert 500 < int(est.memory.max_concurrency) < 900
    assert kv_bytes_per_sequence_per_gpu(model_shapes(model), arrays(tp=8), np.array(2000)) == 327_680 * 2000 / 8
