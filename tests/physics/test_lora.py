"""LoRA fine-tuning (planner/physics/lora.py and its use in memory, time and FLOPs), derived by hand from the
model's shapes: Llama 3.1 8B has h 4096, 32 query heads and 8 KV heads of 128, an FFN of 14,336 (gated), 32
layers, a vocabulary of 128,256 and 8,030,261,248 parameters."""

from __future__ import annotations

import numpy as np
import pytest

from planner.engines.load import load_hardware, load_model
from planner.errors import PlannerError
from planner.physics.lora import adapter_params, adapter_traffic_bytes_per_token
from planner.specs.layout import Layout
from planner.training.estimate import estimate
from planner.training.flops import step_flop
from planner.training.rules import check_layout, resolve_layout

MODEL = load_model("llama-3.1-8b").spec
HW = load_hardware("h100-sxm").spec
H, KV, F, LAYERS = 4096, 8 * 128, 14336, 32
# (in, out) of each weight LoRA wraps in a Hugging Face Llama layer: q, k, v, o, then gate, up, down
ATTENTION = [(H, H), (H, KV), (H, KV), (H, H)]
MLP = [(H, F), (H, F), (F, H)]


def _lay(**fields):
    return resolve_layout(MODEL, fields.pop("gpus", 1), global_batch=fields.pop("global_batch", 8), seq_len=4096,
                          **fields)


@pytest.mark.parametrize(("targets", "weights"), [("all_linear", ATTENTION + MLP), ("attention", ATTENTION),
                                                  ("qkv", ATTENTION[:3])])
def test_adapter_parameters_are_r_times_in_plus_out(targets, weights):
    lay = _lay(lora_rank=16, lora_targets=targets).to_arrays()
    per_layer = 16 * sum(i + o for i, o in weights)
    assert float(adapter_params(MODEL, lay, moe_layer=False)[0]) == per_layer
    # all linear (q/k/v/o/gate/up/down, as Hugging Face's modules are): 32 x 16 x 81,920 = 41,943,040; attention
    # alone: 32 x 16 x 26,624; q, k and v: 32 x 16 x 18,432
    assert LAYERS * per_layer == {"all_linear": 41_943_040, "attention": 13_631_488, "qkv": 9_437_184}[targets]


def test_tensor_parallel_splits_b_of_a_column_parallel_weight_and_a_of_a_row_parallel_one():
    lay = _lay(gpus=2, tp=2, lora_rank=16).to_arrays()
    # column-parallel (q, k, v, gate, up): in + out/2; row-parallel (o, down): in/2 + out
    column = [(H, H), (H, KV), (H, KV), (H, F), (H, F)]
    row = [(H, H), (F, H)]
    expected = 16 * (sum(i + o / 2 for i, o in column) + sum(i / 2 + o for i, o in row))
    assert float(adapter_params(MODEL, lay, moe_layer=False)[0]) == expected


def test_no_lora_no_adapters():
    lay = _lay().to_arrays()
    assert float(adapter_params(MODEL, lay, moe_layer=False)[0]) == 0.0
    fwd, bwd = adapter_traffic_bytes_per_token(MODEL, lay, moe_layer=False)
    assert float(fwd[0]) == float(bwd[0]) == 0.0


def test_traffic_per_token_by_hand():
    lay = _lay(lora_rank=8, lora_targets="attention").to_arrays()
    fwd, bwd = adapter_traffic_bytes_per_token(MODEL, lay, moe_layer=False)
    # forward 2 bytes per input and 12 per output element of each adapter; backward 10 and 8
    assert float(fwd[0]) == sum(2 * i + 12 * o for i, o in ATTENTION)
    assert float(bwd[0]) == sum(10 * i + 8 * o for i, o in ATTENTION)


def test_frozen_weights_keep_no_gradient_or_optimizer_state():
    full = estimate(MODEL, HW, _lay(engine="automodel", micro_batch=2, global_batch=32))
    lora = estimate(MODEL, HW, _lay(engine="automodel", micro_batch=2, global_batch=32, lora_rank=16))
    adapters = 41_943_040
    stage, base = lora.stages[0], full.stages[0]
    # the automodel profile keeps bf16 gradients, and bf16 moments with the bf16 weights as master (4 bytes)
    assert stage.gradients_bytes == adapters * 2
    assert stage.optimizer_bytes == adapters * 4
    assert stage.weights_bytes == base.weights_bytes + adapters * 2  # the frozen weights are still held
    assert base.gradients_bytes == 8_030_261_248 * 2  # full fine-tuning: every parameter's bf16 gradient


def test_lora_moves_no_frozen_gradient_and_skips_the_weight_gradient_gemms():
    full = estimate(MODEL, HW, _lay(gpus=8, zero=0, global_batch=64))
    lora = estimate(MODEL, HW, _lay(gpus=8, zero=0, global_batch=64, lora_rank=16))
    assert lora.scalar("step_seconds") < full.scalar("step_seconds")
    assert lora.scalar("dp_comm_seconds") <= full.scalar("dp_comm_seconds")
    assert lora.scalar("optimizer_seconds") < full.scalar("optimizer_seconds")  # the adapters' step alone
    # a frozen base GEMM's backward is one GEMM (its input gradient) where training it takes two: the compute
    # comes down by less than a third (the attention core and the element-wise work are unchanged), never below 2/3
    ratio = lora.scalar("compute_seconds") / full.scalar("compute_seconds")
    assert 2 / 3 < ratio < 1


def test_model_flops_count_one_backward_gemm_per_frozen_weight():
    tokens = 64 * 4096
    full = step_flop(MODEL, _lay(gpus=8, global_batch=64).to_arrays())
    lora = step_flop(MODEL, _lay(gpus=8, global_batch=64, lora_rank=16).to_arrays())
    # what LoRA leaves out is each frozen weight's weight-gradient GEMM, 2 FLOP per weight and token, over the
    # parameters the model FLOPs count (the 6N rule's: every layer parameter, its two norms included, and the output
    # layer; not the input embedding, 128,256 x 4096, nor the final norm of 4,096)
    gemm_params = 8_030_261_248 - 128_256 * 4096 - 4096
    assert float(full.model_flop[0] - lora.model_flop[0]) == pytest.approx(tokens * 2 * gemm_params, rel=1e-12)


def test_lora_layout_rules():
    with pytest.raises(ValueError, match="lora_targets applies only with lora_rank"):
        Layout(lora_targets="attention", global_batch=8, seq_len=1024)
    with pytest.raises(ValueError, match="optimizer muon"):
        Layout(lora_rank=8, optimizer="muon", global_batch=8, seq_len=1024)
    with pytest.raises(PlannerError, match="engine_no_lora|has no LoRA|lora_rank"):
        check_layout(MODEL, resolve_layout(MODEL, 8, global_batch=8, seq_len=1024, engine="torchtitan", zero=3,
                                           lora_rank=8), 8)


def test_arrays_round_trip_the_lora_fields():
    for fields in ({}, {"lora_rank": 32}, {"lora_rank": 4, "lora_targets": "attention"},
                   {"lora_rank": 8, "lora_targets": "qkv"}):
        lay = _lay(**fields)
        assert lay.to_arrays().to_layout(0, dtype=lay.dtype, engine=lay.engine) == lay
        assert np.asarray(lay.to_arrays().lora_rank)[0] == (lay.lora_rank or 0)


def test_frozen_linear_layers_keep_no_input_for_a_weight_gradient():
    from planner.training.memory import layer_activation_bytes_per_token

    def stored(**fields):
        lay = _lay(**fields).to_arrays()
        return float(layer_activation_bytes_per_token(MODEL, lay, moe_layer=False).stored[0])

    full = stored()
    # bf16: with adapters on the MLP every linear still keeps its 16-bit input (the adapter's); without them fc1's
    # input (the second norm's output, h) and fc2's input (f) are not kept: 2 x (4,096 + 14,336) bytes per token
    assert stored(lora_rank=16) == full
    assert full - stored(lora_rank=16, lora_targets="attention") == 2 * (H + F)
    assert full - stored(lora_rank=16, lora_targets="qkv") == 2 * (H + F)
    # fp8 (tensorwise): training keeps the 1-byte casts of the QKV and fc1 inputs and of fc2's input; LoRA's 16-bit
    # adapters keep the 16-bit tensors instead (QKV input always, fc1 and fc2 inputs with MLP adapters)
    fp8 = stored(dtype="fp8")
    assert stored(dtype="fp8", lora_rank=16) - fp8 == (2 - 1) * (H + H + F)
    assert stored(dtype="fp8", lora_rank=16, lora_targets="qkv") - fp8 == (2 - 1) * H - 1 * (H + F)


def test_frozen_routed_experts_keep_neither_their_inputs_nor_their_activation_output():
    from planner.training.memory import layer_activation_bytes_per_token

    mixtral = load_model("mixtral-8x7b").spec  # h 4,096; 8 experts, top 2, each 14,336 wide; no shared expert

    def stored(**fields):
        lay = resolve_layout(mixtral, 8, global_batch=8, seq_len=4096, zero=1, **fields).to_arrays()
        return float(layer_activation_bytes_per_token(mixtral, lay, moe_layer=True).stored[0])

    # bf16, tp 1, balanced routing: each token's 2 dispatched copies keep fc1's input (2 x 2h bytes) and the experts'
    # activation output (2 x 2 x 14,336) for the weight gradients; frozen experts keep neither
    assert stored() - stored(lora_rank=16) == 2 * 2 * 4096 + 2 * 2 * 14336
