"""Solve torchtitan's async-TP share (EngineProfile.efficiency.tp_overlap_hidden_share of the torchtitan profile)
from torchtitan's own pair of runs: Llama 3 70B on 256 H100, FSDP 32 x TP 8, without and with AsyncTP
(pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table 4: 829 and 876 tokens/s/GPU).

Usage: python benchmarks/calibrate_torch_async_tp.py

The share is the fraction of the traffic Transformer Engine's userbuffer overlap hides that torch's micro-pipeline
TP hides; it is found by bisection so that the model's step-time ratio of the two runs equals the measured one.
"""

from __future__ import annotations

from planner.specs.engine import engine_profile
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec
from planner.training.estimate import evaluate
from planner.validate.training import published_cases

PAIR = ("tt24_t4_70b_2d", "tt24_t4_70b_2d_asynctp")


def main() -> None:
    from planner.engines.load import load_hardware

    cases = {c["id"]: c for c in published_cases() if c["id"] in PAIR}
    plain, overlapped = (cases[i] for i in PAIR)
    measured = plain["published"]["value"] / overlapped["published"]["value"]  # step ratio 2D / AsyncTP
    model = ModelSpec.model_validate(plain["model"])
    hw = load_hardware(plain["hardware"]).spec
    base = engine_profile("torchtitan")

    def ratio(share: float) -> float:
        eng = base.model_copy(update={"efficiency": base.efficiency.model_copy(update={"tp_overlap_hidden_share": share})})
        steps = [float(evaluate(model, hw, Layout.model_validate(c["layout"]).to_arrays(), engine=eng).step_seconds[0])
                 for c in (plain, overlapped)]
        return steps[0] / steps[1]

    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if ratio(mid) < measured:
            lo = mid
        else:
            hi = mid
    print(f"measured 2D / AsyncTP step ratio {measured:.4f}; model at share 0: {ratio(0.0):.4f}, at 1: {ratio(1.0):.4f}")
    print(f"tp_overlap_hidden_share = {(lo + hi) / 2:.3f}")


if __name__ == "__main__":
    main()
