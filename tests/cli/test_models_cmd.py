"""`planner models` and `planner models show`: output, JSON keys, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"

SHOW_KEYS = {"id", "params", "active_params", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads",
             "ffn_hidden_size", "vocab_size", "kv_cache_bytes_per_token"}

GOOD_YAML = """\
name: tiny
num_layers: 2
hidden_size: 8
num_attention_heads: 4
num_kv_heads: 2
ffn_hidden_size: 16
vocab_size: 10
max_seq_len: 4
"""


def assert_one_line_error(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error:")
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n")
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


# Listing ----------------------------------------------------------------------------------------
def test_models_table_lists_the_catalog(run_cli):
    result = run_cli("models")
    assert result.exit_code == 0, result.output
    for text in ("llama-3.1-70b", "70.6 B", "deepseek-v3", "671.0 B", "37.6 B", "mixtral", "heads/kv"):
        assert text in result.stdout


def test_models_table_shows_the_context_and_rows_do_not_wrap(run_cli, monkeypatch):
    # Serving needs the longest context a model takes (input + output must fit it); one line per model.
    monkeypatch.delenv("COLUMNS", raising=False)
    out = run_cli("models").stdout
    lines = out.splitlines()
    assert "context" in out and max(len(line) for line in lines) <= 160
    body = [line for line in lines if line.startswith("│")]
    assert len(body) == len(json.loads(run_cli("models", "--format", "json").stdout))
    row = next(line for line in body if " llama-3.1-70b " in line)
    assert " 131,072 " in row


def test_models_json(run_cli):
    result = run_cli("models", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert isinstance(rows, list) and len(rows) >= 22
    by_id = {row["id"]: row for row in rows}
    assert SHOW_KEYS <= set(by_id["llama-3.1-8b"])
    assert by_id["llama-3.1-8b"]["params"] == 8_030_261_248  # HF meta-llama/Llama-3.1-8B
    assert by_id["mixtral-8x7b"]["params"] == 46_702_792_704  # HF mistralai/Mixtral-8x7B-v0.1
    assert "mixtral" in by_id["mixtral-8x7b"]["aliases"]


# Show -------------------------------------------------------------------------------------------
def test_show_json_catalog_id(run_cli):
    result = run_cli("models", "show", "llama-3.1-70b", "--format", "json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert SHOW_KEYS <= set(row)
    assert row["id"] == "llama-3.1-70b"
    assert row["params"] == row["active_params"] == 70_553_706_496
    assert (row["num_layers"], row["hidden_size"], row["num_attention_heads"], row["num_kv_heads"]) == (80, 8192, 64, 8)
    assert (row["ffn_hidden_size"], row["vocab_size"]) == (28672, 128256)
    # 2 (K,V) x 80 layers x 8 KV heads x 128 x 2 bytes
    assert row["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 2


def test_show_alias(run_cli):
    row = json.loads(run_cli("models", "show", "mixtral", "--format", "json").stdout)
    assert row["id"] == "mixtral-8x7b"
    assert row["active_params"] < row["params"]


def test_show_table(run_cli):
    result = run_cli("models", "show", "deepseek-v3")
    assert result.exit_code == 0, result.output
    for text in ("671,026,419,200", "KV cache", "70,272", "kv_lora_rank=512", "256 x 2048"):
        assert text in result.stdout


def test_show_hf_config_json(run_cli):
    result = run_cli("models", "show", HF / "mixtral-8x7b-v0.1.json", "--format", "json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["id"] == "mixtral-8x7b-v0.1" and row["params"] == 46_702_792_704


def test_show_multimodal_hf_config_says_the_vision_tower_is_not_modelled(run_cli):
    result = run_cli("models", "show", HF / "qwen2.5-vl-7b-instruct.json", "--format", "json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    # transformers 5.24.0: 7,615,616,512 outside the vision tower (see tests/engines/test_hf_config.py)
    assert row["params"] == 7_615_616_512 and "vision tower" in row["source"]


def test_unknown_architecture_key_in_hf_config_is_one_line_error(run_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads((HF / "gpt-oss-20b.json").read_text()), "num_mtp_layers": 1}))
    assert_one_line_error(run_cli("models", "show", path), "num_mtp_layers", "may change the architecture")


def test_show_our_yaml(run_cli, tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(GOOD_YAML)
    row = json.loads(run_cli("models", "show", path, "--format", "json").stdout)
    # Hand count (see tests/physics/test_params.py::test_tiny_gated_gqa_untied): 1352.
    assert row["id"] == "tiny" and row["params"] == 1352
    # 2 x 2 layers x 2 KV heads x head_dim 2 x 2 bytes
    assert row["kv_cache_bytes_per_token"] == 32


@pytest.mark.parametrize("args", [("models", "--help"), ("models", "show", "--help")])
def test_help_ends_with_an_example(run_cli, args):
    result = run_cli(*args)
    assert result.exit_code == 0
    assert "Example:" in result.stdout and "planner models" in result.stdout


# Bad input: one line on stderr, exit 2 ----------------------------------------------------------
def test_unknown_id_suggests_closest(run_cli):
    assert_one_line_error(run_cli("models", "show", "llama-3.1-7b"), "unknown model id", "did you mean", "llama-3.1-70b")


def test_missing_file(run_cli, tmp_path):
    assert_one_line_error(run_cli("models", "show", tmp_path / "nope.yaml"), "nope.yaml", "not found")


def test_malformed_yaml(run_cli, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: [unclosed\n")
    assert_one_line_error(run_cli("models", "show", path), "bad.yaml", "malformed YAML", "line")


def test_malformed_json(run_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n')
    assert_one_line_error(run_cli("models", "show", path), "config.json", "malformed JSON", "line 2")


@pytest.mark.parametrize("extra,words", [
    ("bogus_key: 1\n", ("bogus_key", "unknown key")),
    ("head_dim: two\n", ("head_dim", "integer")),
])
def test_yaml_field_errors(run_cli, tmp_path, extra, words):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_YAML + extra)
    assert_one_line_error(run_cli("models", "show", path), "m.yaml", *words)


def test_non_positive_size(run_cli, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_YAML.replace("num_layers: 2", "num_layers: 0"))
    assert_one_line_error(run_cli("models", "show", path), "m.yaml", "num_layers", "greater than 0")


def test_heads_not_divisible_by_kv_heads(run_cli, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(GOOD_YAML.replace("num_kv_heads: 2", "num_kv_heads: 3"))
    assert_one_line_error(run_cli("models", "show", path), "m.yaml", "not divisible by num_kv_heads")


def test_hf_unknown_model_type(run_cli, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "bert", "hidden_size": 768}')
    assert_one_line_error(run_cli("models", "show", path), "config.json", "model_type", "supported:", "llama")


def test_hf_unknown_key(run_cli, tmp_path):
    data = json.loads((HF / "llama-3.1-8b.json").read_text())
    data["num_experts"] = 8
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    assert_one_line_error(run_cli("models", "show", path), "config.json", "num_experts", "unknown key")


def test_hf_wrong_type(run_cli, tmp_path):
    data = json.loads((HF / "llama-3.1-8b.json").read_text())
    data["num_hidden_layers"] = "32"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    assert_one_line_error(run_cli("models", "show", path), "num_hidden_layers", "positive integer")


def test_bad_format_choice(run_cli):
    assert_one_line_error(run_cli("models", "show", "llama-3.1-8b", "--format", "xml"), "--format")


def test_show_names_sparse_attention(run_cli):
    """GLM-5: the indexer's 32 heads of 128 keeping 2,048 keys per query; its cache adds 128 fp8 values and an fp32
    scale per token and layer to MLA's (512 + 64) x 2 bytes: 78 x 1,284 = 100,152 bytes."""
    row = json.loads(run_cli("models", "show", "glm-5", "--format", "json").stdout)
    assert row["sparse_attention"] == {"index_heads": 32, "index_head_dim": 128, "topk": 2048}
    assert row["kv_cache_bytes_per_token"] == 78 * ((512 + 64) * 2 + 128 + 4) == 100_152
    table = run_cli("models", "show", "glm-5").stdout
    assert "indexer 32 heads x 128, top-2,048 keys per query" in table
    assert json.loads(run_cli("models", "show", "llama-3.1-8b", "--format", "json").stdout)["sparse_attention"] is None
