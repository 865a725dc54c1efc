"""Serving time: physical bounds, identities between the figures, and the effect of each input.

Bounds are computed here from the model's shapes and the datasheet peaks, independently of the
cost model's own accounting.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from planner.engines.load import load_hardware
from planner.physics.kernels import GEMM_FIXED_SECONDS
from planner.serving.estimate import InferenceArrays, estimate_inference
from planner.serving.inputs import model_shapes
from planner.serving.time import (
    FIRST_TOKEN_OVERHEAD_SECONDS,
    KV_PAGE_TOKENS,
    PASS_OVERHEAD_SECONDS,
    PER_HEAD_KV_L2_HIT_FRACTION,
    SERVING_MEMORY_BANDWIDTH_FRACTION,
    causal_pairs,
    inference_times,
)
from planner.specs.hardware import HardwareProfile
from planner.specs.model import ModelSpec

H, FFN, HEADS, KV, LAYERS, VOCAB = 8192, 28672, 64, 8, 80, 32000
# Llama-2-70B matrices per layer: q, o (h x h), k, v (h x 1024), gate, up, down (h x ffn)
LAYER_MATRICES = 2 * H * H + 2 * H * KV * 128 + 3 * H * FFN


def llama2_70b() -> ModelSpec:
    return ModelSpec(name="Llama-2-70B", num_layers=LAYERS, hidden_size=H, num_attention_heads=HEADS,
                     num_kv_heads=KV, ffn_hidden_size=FFN, vocab_size=VOCAB, max_seq_len=4096)


def llama2_7b() -> ModelSpec:
    return ModelSpec(name="Llama-2-7B", num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=32,
                     ffn_hidden_size=11008, vocab_size=32000, max_seq_len=4096)


def arrays(**kw: object) -> InferenceArrays:
    return InferenceArrays.build(**kw)  # type: ignore[arg-type]


H100 = load_hardware("h100-sxm").spec
A100 = load_hardware("a100-80gb").spec


@settings(max_examples=80, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    c=st.integers(1, 512),
    s=st.integers(1, 3000),
    o=st.integers(1, 1000),
    wd=st.sampled_from(["bf16", "fp8", "fp4", "int8", "int4"]),
    kd=st.sampled_from(["bf16", "fp8"]),
    per_head=st.booleans(),
    hw=st.sampled_from([H100, A100, load_hardware("b200").spec]),
)
def test_tpot_never_below_bytes_read_over_bandwidth(tp: int, c: int, s: int, o: int, wd: str, kd: str,
                                                    per_head: bool, hw: HardwareProfile) -> None:
    # Every decode step streams each GPU's share of the layer matrices and of the KV cache at least once.
    o = min(o, 4096 - s)
    if o < 1:
        return
    x = arrays(tp=tp, concurrency=c, input_len=s, output_len=o, weight_dtype=wd, kv_dtype=kd,
               per_head_decode_attention=per_head)
    t = inference_times(model_shapes(llama2_70b()), hw, x)
    weight_bytes = {"bf16": 2, "fp8": 1, "fp4": 0.5, "int8": 1, "int4": 0.5}[wd]
    kv_bytes = {"bf16": 2, "fp8": 1}[kd]
    context = s + o / 2  # the mean context the static TPOT is taken at
    read = LAYERS * LAYER_MATRICES / tp * weight_bytes + c * context * 2 * LAYERS * max(KV // tp, 1) * 128 * kv_bytes
    bound = read / hw.accelerator.memory_bandwidth_bytes_per_s
    assert float(t.static.tpot_seconds) >= bound
    assert float(t.continuous.tpot_seconds) >= LAYERS * LAYER_MATRICES / tp * weight_bytes / (
        hw.accelerator.memory_bandwidth_bytes_per_s)


@settings(max_examples=80, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2, 4]),
    c=st.integers(1, 256),
    s=st.integers(1, 4000),
    wd=st.sampled_from(["bf16", "fp8", "int8", "int4"]),
    hw=st.sampled_from([H100, A100]),
)
def test_ttft_never_below_prefill_flop_over_peak(tp: int, pp: int, c: int, s: int, wd: str,
                                                 hw: HardwareProfile) -> None:
    # The prefill multiplies every prompt token through every layer matrix: 2 FLOP per weight per token,
    # spread over at most tp x pp GPUs, at best at the peak of the compute dtype (fp8 weights: fp8 peak).
    x = arrays(tp=tp, pp=pp, concurrency=c, input_len=s, output_len=1, weight_dtype=wd)
    t = inference_times(model_shapes(llama2_70b()), hw, x)
    peak = hw.peak_flops("fp8") if wd == "fp8" and "fp8" in hw.accelerator.peak_flops_per_s else hw.peak_flops("bf16")
    flop = 2 * LAYERS * LAYER_MATRICES * c * s
    attention = 2 * LAYERS * HEADS * (128 + 128) * c * s * (s + 1) / 2  # causal half, QK^T and AV
    bound = flop / (tp * pp) / peak + attention / (tp * pp) / hw.peak_flops("bf16")
    assert float(t.static.ttft_seconds) >= bound
    assert float(t.continuous.ttft_seconds) >= 2 * LAYERS * LAYER_MATRICES * s / (tp * pp) / peak


def test_static_throughput_identity() -> None:
    # static: c x O tokens leave in TTFT + (O - 1) x TPOT
    x = arrays(tp=4, concurrency=64, input_len=1000, output_len=300)
    t = inference_times(model_shapes(llama2_70b()), H100, x)
    st_ = t.static
    assert float(st_.output_tokens_per_second) == pytest.approx(64 * 300 / float(st_.e2e_seconds))
    assert float(st_.e2e_seconds) == pytest.approx(float(st_.ttft_seconds) + 299 * float(st_.tpot_seconds))
    assert float(st_.output_tokens_per_second_per_gpu) == pytest.approx(float(st_.output_tokens_per_second) / 4)


def test_continuous_littles_law() -> None:
    # closed loop of c clients: c = lambda x (TTFT + (O - 1) TPOT) (Little's law), O tokens per request
    x = arrays(tp=2, concurrency=100, input_len=500, output_len=250)
    t = inference_times(model_shapes(llama2_70b()), H100, x)
    cont = t.continuous
    assert float(cont.in_flight) == pytest.approx(100, rel=1e-6)
    assert float(cont.request_rate) * float(cont.e2e_seconds) == pytest.approx(100, rel=1e-6)
    assert float(cont.output_tokens_per_second) == pytest.approx(float(cont.request_rate) * 250)
    # nearly every in-flight sequence decodes: throughput a little below c / TPOT
    assert 0.9 < float(cont.output_tokens_per_second) * float(cont.tpot_seconds) / 100 < 1.0


def test_causal_pairs_by_hand() -> None:
    # 4 tokens: 1 + 2 + 3 + 4 = 10 pairs; window 2: 1 + 2 + 2 + 2 = 7
    assert float(causal_pairs(np.array(4))) == 10
    assert float(causal_pairs(np.array(4), window=2)) == 7
    assert float(causal_pairs(np.array(2), window=5)) == 3


def test_batch_one_decode_is_memory_bound_and_tp_helps() -> None:
    model = llama2_70b()
    x = arrays(tp=np.array([1, 2, 4, 8]), concurrency=1, input_len=100, output_len=100)
    t = inference_times(model_shapes(model), H100, x)
    tpot = t.static.tpot_seconds
    assert np.all(np.diff(tpot) < 0)
    d = t.decode
    # The GEMMs stream ~138 GB / tp of weights at the achievable bandwidth (serving's streaming fraction),
    # plus each GEMM's fixed cost.
    bw = H100.accelerator.memory_bandwidth_bytes_per_s * SERVING_MEMORY_BANDWIDTH_FRACTION
    weight_seconds = 2 * LAYERS * LAYER_MATRICES / np.array([1, 2, 4, 8]) / bw
    assert np.all(d.gemm_seconds >= weight_seconds)
    fixed = 4 * LAYERS * GEMM_FIXED_SECONDS / H100.efficiency.matmul.peak_fraction
    assert np.all(d.gemm_seconds <= weight_seconds + 2 * fixed)


def test_fp8_speeds_prefill_int4_speeds_decode_only() -> None:
    model = llama2_70b()
    x = arrays(tp=1, concurrency=np.array([1, 1, 1]), input_len=2048, output_len=64,
               weight_dtype=np.array(["bf16", "fp8", "int4"]))
    t = inference_times(model_shapes(model), H100, x)
    ttft, tpot = t.static.ttft_seconds, t.static.tpot_seconds
    assert ttft[1] < ttft[0]  # fp8 tensor cores
    assert tpot[2] < tpot[1] < tpot[0]  # fewer weight bytes to stream
    # int4 is weight-only: the same 16-bit GEMM FLOPs in the prefill
    assert t.prefill.gemm_flop[2] == t.prefill.gemm_flop[0]


def test_nvfp4_weights_run_on_fp4_tensor_cores_where_the_chip_has_them() -> None:
    # Blackwell (B200): the prefill's GEMMs at the fp4 peak x its NVFP4 plateau, faster than fp8's; a decode of one
    # sequence streams 0.5625 bytes per weight, less than fp8's 1. Hopper has no fp4 tensor cores: the same weights
    # weight-only, at the 16-bit rate (vLLM's FP4 Marlin kernel), with the same bytes streamed.
    from planner.serving.time import rates

    b200 = load_hardware("b200").spec
    x = arrays(tp=1, concurrency=1, input_len=2048, output_len=64, weight_dtype=np.array(["fp8", "fp4"]))
    r = rates(b200, x)
    assert r.gemm_flop_per_s.tolist() == [4.5e15 * 0.654, 9e15 * 0.43]
    t = inference_times(model_shapes(llama2_70b()), b200, x)
    assert t.static.ttft_seconds[1] < t.static.ttft_seconds[0]
    assert t.static.tpot_seconds[1] < t.static.tpot_seconds[0]
    hopper = rates(H100, arrays(tp=1, concurrency=1, input_len=2048, output_len=64,
                                weight_dtype=np.array(["bf16", "fp4"])))
    assert hopper.gemm_flop_per_s[1] == hopper.gemm_flop_per_s[0]


def test_per_head_decode_attention_rereads_kv_for_gqa_only() -> None:
    expected = 1 + (HEADS // KV - 1) * (1 - PER_HEAD_KV_L2_HIT_FRACTION)
    for model, ratio in ((llama2_70b(), expected), (llama2_7b(), 1.0)):
        x = arrays(tp=1, concurrency=64, input_len=2000, output_len=1000,
                   per_head_decode_attention=np.array([False, True]))
        d = inference_times(model_shapes(model), A100, x).decode
        # long contexts: decode attention is bound by the K/V stream
        assert d.attention_seconds[1] / d.attention_seconds[0] == pytest.approx(ratio, rel=1e-6)


def test_pipeline_parallel_batch_one_gains_nothing() -> None:
    # One sequence cannot fill a pipeline: TTFT and TPOT stay about those of one stage holding everything.
    model = llama2_70b()
    x = arrays(tp=2, pp=np.array([1, 2, 4]), concurrency=1, input_len=512, output_len=64)
    t = inference_times(model_shapes(model), H100, x)
    np.testing.assert_allclose(t.static.tpot_seconds, t.static.tpot_seconds[0], rtol=0.1)
    assert np.all(t.static.output_tokens_per_second_per_gpu[1:] < t.static.output_tokens_per_second_per_gpu[0])


def test_pipeline_with_fewer_micro_batches_than_stages_takes_the_traversal() -> None:
    # Regression: one sequence on pp stages was charged pp slots of the most loaded stage: its ceil(L/pp)
    # layers, the output head and a p2p send, pp times over (80 layers on 3 stages costed as 81, the head
    # 3 times). It crosses each stage once: the traversal.
    model = llama2_70b()  # 80 layers: uneven on 3 stages
    x = arrays(tp=2, pp=np.array([1, 2, 3, 4, 8]), concurrency=1, input_len=512, output_len=64)
    t = inference_times(model_shapes(model), H100, x)
    np.testing.assert_allclose(t.static.tpot_seconds, t.decode.traversal_seconds)
    # one prefill pass, and the request's host-side latency
    np.testing.assert_allclose(t.static.ttft_seconds, t.prefill.traversal_seconds + FIRST_TOKEN_OVERHEAD_SECONDS)
    # one client: nobody else's prompt interleaves with its decode, so its TPOT is the static one
    np.testing.assert_allclose(t.continuous.tpot_seconds, t.static.tpot_seconds)
    pp = x.pp
    assert np.all(t.static.tpot_seconds[pp > 1] < (pp * t.decode.stage_seconds)[pp > 1])
    # the extra stages add only their pass overheads and p2p sends, never more layers
    extra = t.static.tpot_seconds - t.static.tpot_seconds[0]
    assert np.all(extra[1:] > 0) and np.all(np.diff(extra) > 0)
    assert np.all(extra <= (pp - 1) * (PASS_OVERHEAD_SECONDS + 1e-4))
    # Two sequences on 8 stages: two micro-batches, each must still cross all 8 stages per token.
    x2 = arrays(tp=2, pp=8, concurrency=2, input_len=512, output_len=64)
    t2 = inference_times(model_shapes(model), H100, x2)
    assert t2.static.tpot_seconds == pytest.approx(float(t2.decode.traversal_seconds))
    # As many micro-batches as stages: the most loaded stage runs all of them back to back.
    x8 = arrays(tp=2, pp=np.array([2, 3]), concurrency=64, input_len=512, output_len=64)
    t8 = inference_times(model_shapes(model), H100, x8)
    np.testing.assert_allclose(t8.static.tpot_seconds, x8.pp * t8.decode.stage_seconds)
    passes = t8.prefill_passes
    np.testing.assert_allclose(t8.static.ttft_seconds,
                               t8.prefill.traversal_seconds + (passes - 1) * t8.prefill.stage_seconds
                               + FIRST_TOKEN_OVERHEAD_SECONDS)


def test_decode_reads_the_tied_output_head() -> None:
    # Regression: with tied embeddings the output head's V x h table was not read at all in decode
    # (the head's weights were counted as the final norm alone): Gemma-2-2B's 1.2 GB of 5.2 GB.
    from planner.engines.load import load_model

    tied = load_model("gemma-2-2b").spec
    untied = tied.model_copy(update={"tied_embeddings": False})
    x = arrays(tp=np.array([1, 2]), concurrency=1, input_len=100, output_len=10)
    word = tied.vocab_size * tied.hidden_size * 2 / np.array([1, 2])
    d_tied = inference_times(model_shapes(tied), H100, x).decode
    d_untied = inference_times(model_shapes(untied), H100, x).decode
    np.testing.assert_allclose(d_tied.weight_bytes_read, d_untied.weight_bytes_read)
    layers = d_tied.weight_bytes_read - word
    assert np.all(layers > 0) and np.all(word / d_tied.weight_bytes_read > 0.2)
    bound = d_tied.weight_bytes_read / H100.accelerator.memory_bandwidth_bytes_per_s
    assert np.all(inference_times(model_shapes(tied), H100, x).static.tpot_seconds > bound)


def test_pipeline_parallel_large_batch_shares_compute() -> None:
    # A large, compute-bound batch keeps every stage busy: pp 2 about doubles the replica's throughput.
    model = llama2_70b()
    x = arrays(tp=2, pp=np.array([1, 2]), concurrency=512, input_len=128, output_len=128, weight_dtype="fp8",
               kv_dtype="fp8")
    t = inference_times(model_shapes(model), H100, x)
    ratio = t.static.output_tokens_per_second[1] / t.static.output_tokens_per_second[0]
    assert 1.5 < ratio < 2.1


def test_moe_decode_reads_only_touched_experts() -> None:
    # Mixtral-like: 8 experts, top-2. One token reads 2 of 8 experts' weights; 64 tokens touch all of them.
    model = ModelSpec.model_validate(dict(
        name="moe", num_layers=4, hidden_size=1024, num_attention_heads=8, num_kv_heads=8, ffn_hidden_size=4096,
        vocab_size=1000, max_seq_len=4096, moe=dict(num_experts=8, experts_per_token=2, moe_ffn_hidden_size=4096),
    ))
    shapes = model_shapes(model)
    x = arrays(concurrency=np.array([1, 64]), input_len=10, output_len=10)
    d = inference_times(shapes, H100, x).decode
    experts = 4 * 8 * 3 * 1024 * 4096 * 2  # layers x experts x 3 matrices x bytes
    non_expert = d.weight_bytes_read[1] - experts
    assert d.weight_bytes_read[0] == pytest.approx(non_expert + experts * 2 / 8)
    assert d.gemm_flop[1] / d.gemm_flop[0] == pytest.approx(64)


def test_arrays_and_scalars_agree() -> None:
    # One formula, two ways: a grid evaluated at once equals each layout evaluated alone.
    model = llama2_70b()
    tp = np.array([1, 2, 4, 8, 8])
    pp = np.array([1, 2, 1, 1, 2])
    c = np.array([1, 16, 64, 256, 3])
    wd = np.array(["bf16", "fp8", "int4", "int8", "fp8"])
    grid = estimate_inference(model, H100, arrays(tp=tp, pp=pp, concurrency=c, input_len=700, output_len=300,
                                                   weight_dtype=wd))
    for i in range(tp.size):
        one = estimate_inference(model, H100, arrays(tp=int(tp[i]), pp=int(pp[i]), concurrency=int(c[i]),
                                                      input_len=700, output_len=300, weight_dtype=str(wd[i])))
        for name in ("ttft_seconds", "tpot_seconds", "e2e_seconds", "output_tokens_per_second"):
            for batching in ("static", "continuous"):
                got = getattr(grid.serving(batching), name)[i]
                assert got == pytest.approx(float(getattr(one.serving(batching), name)), rel=1e-12)
        assert grid.memory.total_bytes[i] == pytest.approx(float(one.memory.total_bytes), rel=1e-12)
        assert grid.memory.max_concurrency[i] == int(one.memory.max_concurrency)


def test_tp_allreduce_two_per_layer() -> None:
    # Decode of 1 token at tp 2: 2 x 80 all-reduces of 8192 x 2 bytes; tp 1 has none.
    x = arrays(tp=np.array([1, 2]), concurrency=1, input_len=10, output_len=10)
    d = inference_times(model_shapes(llama2_70b()), H100, x).decode
    assert d.tp_comm_seconds[0] == 0
    # each all-reduce at least one link latency (3.4 us on NVLink) -> at least 160 x 3.4 us
    assert d.tp_comm_seconds[1] >= 160 * H100.node.latency_s


def test_mla_decode_reads_the_whole_latent_on_every_tp_rank() -> None:
    # DeepSeek-V3: each decode step reads 61 x (512 + 64) bytes (fp8) per cached token on every GPU,
    # whatever tp is; its attention FLOPs per GPU fall with tp (heads are split).
    model = ModelSpec.model_validate(dict(
        name="DeepSeek-V3", num_layers=61, hidden_size=7168, num_attention_heads=128, ffn_hidden_size=18432,
        vocab_size=129280, max_seq_len=163840,
        moe=dict(num_experts=256, experts_per_token=8, moe_ffn_hidden_size=2048, num_shared_experts=1,
                 num_dense_layers=3, router_bias=True),
        mla=dict(q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    ))
    x = arrays(tp=np.array([8, 16]), concurrency=32, input_len=1000, output_len=1000, weight_dtype="fp8",
               kv_dtype="fp8")
    d = inference_times(model_shapes(model), H100, x).decode
    context = 1000 + 500
    # whole pages: half a page of padding per sequence and layer on average
    assert d.kv_bytes_read.tolist() == [32 * (context + KV_PAGE_TOKENS / 2) * 61 * 576] * 2
    # absorbed attention: 2 x heads/tp x (576 + 512) per cached token per layer
    assert d.attention_flop[0] == pytest.approx(32 * context * 61 * 2 * 16 * (576 + 512))
    assert d.attention_flop[1] == pytest.approx(d.attention_flop[0] / 2)


@settings(max_examples=60, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.sampled_from([1, 2]),
    c=st.integers(1, 1024),
    s=st.integers(1, 3000),
    o=st.integers(2, 1000),
    wd=st.sampled_from(["bf16", "fp8", "int4"]),
    rate=st.sampled_from([0.0, 0.5, 5.0, 50.0]),
    hw=st.sampled_from([H100, A100]),
)
# ten clients of 26-token prompts and 2-token answers: each prompt priced alone in a decode iteration's slack
# let the ten of them share it ten times over (1.02 x the A100's peak before the fix)
@example(tp=1, pp=1, c=10, s=26, o=2, wd="int4", rate=0.0, hw=A100)
def test_physics_bounds_under_load(tp: int, pp: int, c: int, s: int, o: int, wd: str, rate: float,
                                   hw: HardwareProfile) -> None:
    # Whatever the load (a closed loop of c clients, or `rate` requests/s): no percentile of TPOT is below a
    # GPU's share of the layer matrices plus one sequence's KV cache over the datasheet bandwidth, and the
    # output tokens/s per GPU never need more FLOPs than the peak: every output token costs its own
    # decode pass and its share of the prompt, (S + O - 1) / O passes through every layer matrix.
    x = arrays(tp=tp, pp=pp, concurrency=c, input_len=s, output_len=o, weight_dtype=wd, request_rate=rate)
    t = inference_times(model_shapes(llama2_70b()), hw, x)
    weight_bytes = {"bf16": 2, "fp8": 1, "int4": 0.5}[wd]
    stage_matrices = -(-LAYERS // pp) * LAYER_MATRICES / tp
    kv_one = -(-LAYERS // pp) * s * 2 * max(KV // tp, 1) * 128 * 2
    bound = (stage_matrices * weight_bytes + kv_one) / hw.accelerator.memory_bandwidth_bytes_per_s
    peak = hw.peak_flops("fp8") if wd == "fp8" and "fp8" in hw.accelerator.peak_flops_per_s else hw.peak_flops("bf16")
    flop_per_output_token = 2 * LAYERS * LAYER_MATRICES * (s + o - 1) / o
    for serving in (t.static, t.continuous):
        if not bool(serving.stable):
            assert rate > 0 and np.isinf(serving.ttft_seconds)
            continue
        for q in (0, 50, 90, 99):
            assert float(serving.percentile("tpot", q)) >= bound
            assert float(serving.percentile("ttft", q)) > 0
        assert float(serving.output_tokens_per_second_per_gpu) * flop_per_output_token <= peak
