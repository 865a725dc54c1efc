"""Upstream torchtitan train configs, and the model they name, read as torchtitan reads them.

Fixtures: tests/fixtures/engines/upstream/torchtitan/ (repository, path and commit in ../SOURCES.md); the HF
configs are tests/fixtures/hf/ (provenance in tests/engines/test_hf_config.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from planner.engines.load import load_model
from planner.engines.torchtitan import CATALOG_IDS

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UPSTREAM = FIXTURES / "engines" / "upstream" / "torchtitan"


def _check(run_cli, toml: Path, *more: str):
    return run_cli("check", "--torchtitan", toml, "--hardware", "h100-sxm", "--gpus", "8", "--format", "json",
                   "--no-suggest", *more)


def test_flavor_names_the_catalog_model(run_cli):
    result = _check(run_cli, UPSTREAM / "llama3_8b.toml")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)[0]["model"] == "llama-3.1-8b"


def test_the_flavors_hf_config_is_not_a_contradiction_whatever_its_file_is_called(run_cli, tmp_path):
    """A Hugging Face config.json of the model the flavor builds was refused as a 'contradiction' unless its file
    was named like the catalog id (Qwen3-32B/config.json is not 'qwen3-32b'); the architecture decides now."""
    folder = tmp_path / "Qwen3-8B"
    folder.mkdir()
    shutil.copy(FIXTURES / "hf" / "qwen3-8b.json", folder / "config.json")
    toml = tmp_path / "qwen3_8b.toml"
    toml.write_text((UPSTREAM / "qwen3_32b.toml").read_text().replace('flavor = "32B"', 'flavor = "8B"'))
    result = _check(run_cli, toml, "--model", folder / "config.json")
    assert result.exit_code in (0, 1), result.output
    # a config of another model is still a contradiction, named as such
    other = _check(run_cli, toml, "--model", FIXTURES / "hf" / "llama-3.2-3b.json")
    assert other.exit_code == 2 and "is not torchtitan model qwen3 flavor 8B" in other.output


def test_deepseek_v3_16b_flavor_is_the_catalogs_deepseek_v2_lite(run_cli):
    """torchtitan's deepseek_v3 16B flavor is DeepSeek-V2-Lite's architecture, in planner's catalog."""
    alone = _check(run_cli, UPSTREAM / "deepseek_v3_16b.toml")
    assert alone.exit_code in (0, 1), alone.output
    assert json.loads(alone.stdout)[0]["model"] == "deepseek-v2-lite"


def test_a_flavor_planner_has_no_spec_for_takes_the_given_config(run_cli, tmp_path):
    """deepseek_v3 236B maps to deepseek-v2, which planner's catalog lacks: planner asks for the model, and the
    model given is then used (it was refused as contradicting the missing catalog id)."""
    toml = tmp_path / "deepseek_v2.toml"
    toml.write_text((UPSTREAM / "deepseek_v3_16b.toml").read_text().replace('flavor = "16B"', 'flavor = "236B"'))
    asked = _check(run_cli, toml)
    assert asked.exit_code == 2 and "give the model" in asked.output and "deepseek-v2" in asked.output
    result = _check(run_cli, toml, "--model", "deepseek-v2-lite")  # any MoE model
    assert "contradict" not in result.output and result.exit_code in (0, 1), result.output


def test_every_qwen3_flavor_of_torchtitan_has_a_catalog_spec_of_its_shape():
    """torchtitan's qwen3 flavors (torchtitan/models/qwen3/__init__.py @ 238fa99) as the catalog holds them:
    (dim, n_layers, n_heads, hidden_dim, weight tying) copied from that file."""
    flavors = {"0.6B": (1024, 28, 16, 3072, True), "1.7B": (2048, 28, 16, 6144, True), "4B": (2560, 36, 32, 9728, True),
               "8B": (4096, 36, 32, 12288, False), "14B": (5120, 40, 40, 17408, False),
               "32B": (5120, 64, 64, 25600, False)}
    for flavor, (dim, layers, heads, hidden, tied) in flavors.items():
        spec = load_model(CATALOG_IDS[("qwen3", flavor)]).spec
        assert (spec.hidden_size, spec.num_layers, spec.num_attention_heads, spec.ffn_hidden_size,
                spec.tied_embeddings, spec.num_kv_heads, spec.head_dim) == (dim, layers, heads, hidden, tied, 8, 128)


def test_deepseek_v3_16b_config_that_does_not_fit_gets_changes_not_an_internal_error(run_cli):
    """torchtitan's deepseek_v3_16b.toml runs op-level selective AC (activation_checkpoint mode "selective"):
    on 8 H100 with a local batch of 6 (its own 4 fits since the compiled loss keeps 4 bytes per logit, not 12)
    it does not fit, and the suggestions step from op-level AC to full recompute (planner crashed here when the
    suggestions knew only none/selective/full)."""
    result = run_cli("check", "--torchtitan", UPSTREAM / "deepseek_v3_16b.toml", "--hardware", "h100-sxm", "--gpus", "8",
                     "--engine-args=--training.local_batch_size=6")
    assert result.exit_code == 1, result.output
    assert "recompute op -> full" in result.output and "internal error" not in result.output


def test_transformers_backend_config_names_its_hf_model(run_cli):
    """torchtitan's transformers backend trains [hf_transformers] model (Qwen3-4B-Instruct-2507 here, not in
    planner's catalog): planner says which model it needs."""
    result = _check(run_cli, UPSTREAM / "transformers_backend_full.toml")
    assert result.exit_code == 2
    assert "transformers backend with Qwen/Qwen3-4B-Instruct-2507" in result.output and "give the model" in result.output
