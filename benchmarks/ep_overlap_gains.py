"""What the MoE all-to-all overlap saves: planner against the three published before/after pairs of it.

Usage: python benchmarks/ep_overlap_gains.py

Each pair is one layout run with and without Megatron-Core's 1F1B all-to-all overlap
(--overlap-moe-expert-parallel-comm). The model's side is costed with `planner.training.estimate.evaluate`, which
applies no engine rule (Megatron-LM main refuses the overlap beside full recompute; the first pair ran the dev
branch's recompute path), once with the experts' weight gradients delayed (--delay-wgrad-compute, planner's default
with the overlap) and once without, where the run does not say which it used.

- Megatron-LM PR #6311 (dev branch): 64 H100, a 14-layer DeepSeek-V3 (256 experts, MTP 1), tp 1, pp 4 x v 2, ep 16,
  NCCL all-to-all, 2,048 tokens, micro-batch 1, global batch 256, bf16, full recompute: 184.2 -> 198.5 TFLOP/s/GPU
  with CUDA_DEVICE_MAX_CONNECTIONS=32 (+7.8%); PR #6429's arms of the same recipe 3,044 -> 2,839 ms. The PR does not
  say whether --delay-wgrad-compute was set. planner splits the 14 layers itself (not the recipe's
  `Ett|(tt|)*6mL`) and keeps the catalog's 3 dense layers and Megatron's fp32 gradients.
- Megatron MoE Model Zoo, H100 Qwen3-235B-A22B (tp 2, pp 8 x v 4, ep 32, DeepEP): 19.7 -> 17.6 s, the overlap run with
  --delay-wgrad-compute (benchmarks/data/megatron_moe_model_zoo.yaml, the zoo's own flags).
- Megatron-Bridge H100 Qwen3-235B-A22B, the same layout in 25.09 (no overlap) and 25.11 (overlap): 27.2 -> 20.8 s;
  two releases apart, so other changes are in the difference too (planner/validate/training_cases_published.yaml).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import yaml
from outside_moe_model_zoo import DATA as ZOO_DATA
from outside_moe_model_zoo import resolve_row

from planner.engines.load import load_hardware, load_model
from planner.specs.hardware import HardwareProfile
from planner.specs.layout import Layout, LayoutArrays
from planner.specs.model import ModelSpec
from planner.training.estimate import evaluate
from planner.validate.training import published_cases


def _steps(model: ModelSpec, hw: HardwareProfile, layouts: list[Layout]) -> list[float]:
    result = evaluate(model, hw, LayoutArrays.from_layouts(layouts))
    return [float(x) for x in np.asarray(result.step_seconds)]


def _pair(model: ModelSpec, hw: HardwareProfile, plain: Layout) -> dict[str, float]:
    """Seconds without the overlap, with it and delayed weight gradients, and with it without them."""
    with_delay = plain.model_copy(update={"moe_ep_overlap": True, "moe_delay_wgrad": None})
    without = plain.model_copy(update={"moe_ep_overlap": True, "moe_delay_wgrad": False})
    base, delayed, undelayed = _steps(model, hw, [plain.model_copy(update={"moe_delay_wgrad": None}), with_delay,
                                                  without])
    return {"off": base, "on": delayed, "on_no_delay": undelayed}


def pr_6311() -> tuple[dict[str, float], tuple[float, float]]:
    spec = load_model("deepseek-v3").spec
    model = spec.model_copy(update={"num_layers": 14})
    hw = load_hardware("h100-sxm").spec
    plain = Layout(tp=1, pp=4, cp=1, dp=16, ep=16, zero=1, sequence_parallel=False, recompute="full",
                   micro_batch=1, global_batch=256, seq_len=2048, interleave=2, dtype="bf16", grad_dtype="fp32",
                   moe_dispatcher="alltoall", mtp_layers=1)
    # measured: the TFLOP/s of PR #6311 as seconds of one step (same FLOP count both arms)
    return _pair(model, hw, plain), (1 / 184.2, 1 / 198.5)


def zoo() -> tuple[dict[str, float], tuple[float, float]]:
    rows = {row["id"]: row for row in yaml.safe_load(ZOO_DATA.read_text())}
    off, on = (rows[f"zoo_h100_qwen3_235b_ep32_pp8_vp4{tail}"] for tail in ("", "_a2a_overlap"))
    # the overlap run's layout (it also graphs the router and preprocessing) with the overlap off: one change only
    resolved = resolve_row(on)
    plain = resolved.layout.model_copy(update={"moe_ep_overlap": False, "moe_delay_wgrad": None})
    measured = (float(off["table"]["step_seconds"]), float(on["table"]["step_seconds"]))
    return _pair(resolved.model, resolved.hardware, plain), measured


def bridge() -> tuple[dict[str, float], tuple[float, float]]:
    cases = {c["id"]: c for c in published_cases()}
    before, after = cases["mb2509_h100_qwen3_235b_fp8cs"], cases["mb2511_h100_qwen3_235b_fp8cs"]
    model = ModelSpec.model_validate(after["model"])
    hw = load_hardware(after["hardware"]).spec
    plain = Layout.model_validate({**after["layout"], "moe_ep_overlap": False})
    return _pair(model, hw, plain), (float(before["published"]["value"]), float(after["published"]["value"]))


def main() -> None:
    print("| pair | model off (s) | on, delayed wgrad (s) | gain | on, no delay (s) | gain | measured off -> on | gain |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    pairs: list[tuple[str, Any]] = [("Megatron-LM PR #6311 proxy (64 H100)", pr_6311),
                                    ("MoE Model Zoo, H100 Qwen3-235B-A22B", zoo),
                                    ("Megatron-Bridge 25.09 -> 25.11, H100 Qwen3-235B-A22B", bridge)]
    for name, build in pairs:
        model_s, (off, on) = build()
        gain = model_s["off"] / model_s["on"] - 1
        gain_plain = model_s["off"] / model_s["on_no_delay"] - 1
        measured = "TFLOP/s" if off < 0.1 else "s"
        shown = f"{1 / off:.1f} -> {1 / on:.1f} TFLOP/s" if measured == "TFLOP/s" else f"{off:.1f} -> {on:.1f} s"
        print(f"| {name} | {model_s['off']:.2f} | {model_s['on']:.2f} | {gain * 100:+.1f}% | "
              f"{model_s['on_no_delay']:.2f} | {gain_plain * 100:+.1f}% | {shown} | {(off / on - 1) * 100:+.1f}% |")


if __name__ == "__main__":
    main()
