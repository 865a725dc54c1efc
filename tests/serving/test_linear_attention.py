"""Serving Gated DeltaNet hybrids (Qwen3.5): no KV cache on the GDN layers, a fixed state per sequence, the prompt
through the chunked kernel and each decoded token's recurrent step reading and writing that state.

Fixture: tests/fixtures/hf/qwen3.5-27b.json (provenance in tests/engines/test_hf_qwen3_5.py): 64 layers, attention
(4 KV heads of 256) on every 4th, 48 GDN layers of 16 key and 48 value heads of 128, a 4-tap convolution over
2 x 16 x 128 + 48 x 128 = 10,240 channels, fp32 states (mamba_ssm_dtype float32).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.engines.hf_config import model_from_hf_config
from planner.engines.load import load_hardware
from planner.errors import PlannerError
from planner.physics import linear_attention
from planner.serving.estimate import InferenceArrays
from planner.serving.inputs import model_shapes
from planner.serving.memory import inference_memory, kv_bytes_per_sequence_per_gpu, kv_bytes_per_sequence_replica
from planner.serving.rules import check_layout
from planner.serving.time import SERVING_MEMORY_BANDWIDTH_FRACTION, Work, _attention, rates
from planner.specs.serving import ServingLayout

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
H100 = load_hardware("h100-sxm").spec
STATE_PER_LAYER = (48 * 128 * 128 + 3 * 10_240) * 4  # recurrent state + the convolution's last 3 inputs, fp32
KV_PER_TOKEN = 16 * 2 * 4 * 256 * 2  # 16 attention layers, K and V, 4 heads of 256, bf16


def qwen35():
    return model_from_hf_config(json.loads((HF / "qwen3.5-27b.json").read_text()), source="qwen3.5-27b.json")


def arrays(**kw: object) -> InferenceArrays:
    return InferenceArrays.build(**kw)  # type: ignore[arg-type]


def test_a_sequence_holds_kv_on_attention_layers_and_a_state_on_the_others():
    shapes = model_shapes(qwen35())
    x = arrays(tp=2, concurrency=1, input_len=4000, output_len=96)
    # whole replica: 4,096 tokens of KV on 16 layers, and 48 states
    assert float(kv_bytes_per_sequence_replica(shapes, x, np.array(4096))) == 4096 * KV_PER_TOKEN + 48 * STATE_PER_LAYER
    # one GPU of tp 2: half the KV heads and half the GDN heads
    per_gpu = float(kv_bytes_per_sequence_per_gpu(shapes, x, np.array(4096)))
    assert per_gpu == pytest.approx((4096 * KV_PER_TOKEN + 48 * STATE_PER_LAYER) / 2)
    memory = inference_memory(qwen35(), H100, x)
    assert memory.linear_state_bytes_per_sequence == 48 * STATE_PER_LAYER


def test_decode_reads_and_writes_each_state_and_prefill_runs_the_chunked_kernel():
    """The hybrid's attention term is its 16 attention layers' (those of an all-attention twin with 16 layers) plus
    the GDN layers' work: the prompt through the chunked kernel, and each decoding sequence's state read and
    written once per step."""
    model = qwen35()
    twin = model.model_copy(update={"num_layers": 16, "linear_attention": None})
    x = arrays(tp=2, concurrency=8, input_len=1024, output_len=64)
    r = rates(H100, x)
    w = Work(tokens=np.array(1024.0 + 7), sampled=np.array(8.0), prefill_seqs=np.array(1.0),
             prefill_len=np.array(1024.0), decode_seqs=np.array(7.0), decode_context=np.array(1500.0))
    hybrid_s, _, hybrid_read = _attention(model_shapes(model), x, r, w)
    twin_s, _, twin_read = _attention(model_shapes(twin), x, r, w)
    la = model.linear_attention
    assert la is not None
    chunked, _ = linear_attention.core_seconds(la, H100.accelerator.memory_bandwidth_bytes_per_s, np.array(1024.0),
                                               np.array(2))
    state = 2 * 7 * 48 * STATE_PER_LAYER / 2
    bandwidth = H100.accelerator.memory_bandwidth_bytes_per_s * SERVING_MEMORY_BANDWIDTH_FRACTION
    assert float(hybrid_s - twin_s) == pytest.approx(48 * float(chunked) + state / bandwidth)
    assert float(hybrid_read - twin_read) == pytest.approx(state / 2)


def test_tp_must_split_the_key_heads():
    # tp 6 divides the 24 attention heads, not the 16 key heads of the GDN layers
    with pytest.raises(PlannerError, match="linear key heads"):
        check_layout(qwen35(), ServingLayout(tp=6, input_len=128, output_len=16, concurrency=1))


def test_infer_estimate_reports_the_state(run_cli):
    result = run_cli("infer", "estimate", "--model", HF / "qwen3.5-35b-a3b.json", "--hardware", "h100-sxm",
                     "--tp", "2", "--input-len", "2048", "--output-len", "256", "--concurrency", "16",
                     "--format", "json")
    assert result.exit_code == 0, result.output
    memory = json.loads(result.stdout)["memory"]
    # 30 GDN layers of 32 value heads: (32 x 128 x 128 + 3 x (2 x 16 x 128 + 32 x 128)) x 4 bytes each
    assert memory["linear_state_bytes_per_sequence"] == 30 * (32 * 128 * 128 + 3 * 8192) * 4
