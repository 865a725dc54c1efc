"""A serving layout: how one deployment of a model is split over GPUs and loaded.

`ServingLayout` is one layout (pydantic, strict), the serving twin of `planner.specs.layout.Layout`.
The cost model sees it as broadcasting numpy arrays (`planner.serving.inputs.InferenceArrays.from_layout`),
so `infer estimate` (one layout) and `infer search` (a grid) share every formula. The rules a layout must
meet against a model are written once, as data, in `planner.serving.rules`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

WeightDtype = Literal["bf16", "fp8", "fp4", "int8", "int4"]
KvDtype = Literal["bf16", "fp8"]
Batching = Literal["static", "continuous"]
DecodeAttention = Literal["grouped", "per-head"]

DEFAULT_MAX_BATCHED_TOKENS = 8192
"""TensorRT-LLM's default max_num_tokens and vLLM's default max_num_batched_tokens with chunked prefill."""


class ServingLayout(BaseModel):
    """One serving deployment: replica shape, the GPUs it spans, the request shape, dtypes and the load."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: PositiveInt = Field(default=1, description="Tensor-parallel degree of a replica.")
    pp: PositiveInt = Field(default=1, description="Pipeline-parallel degree of a replica.")
    gpus: PositiveInt | None = Field(default=None, description="GPUs in all; replicas = gpus / (tp x pp). "
                                     "Default: one replica.")
    input_len: PositiveInt = Field(description="Prompt tokens per request.")
    output_len: PositiveInt = Field(description="Generated tokens per request (the first included).")
    concurrency: PositiveInt = Field(default=1, description="Requests in flight per replica: the clients of a "
                                     "closed loop, or the batch of static batching.")
    request_rate: PositiveFloat | None = Field(default=None, description="Requests/s arriving over all replicas "
                                               "(open loop, Poisson); replaces concurrency.")
    weight_dtype: WeightDtype = Field(default="bf16", description="Weights of the transformer layers.")
    kv_dtype: KvDtype = Field(default="bf16", description="KV-cache dtype.")
    batching: Batching = Field(default="continuous", description="static or continuous (in-flight) batching.")
    decode_attention: DecodeAttention = Field(default="grouped", description="grouped: K/V read once per KV head; "
                                              "per-head: once per query head.")
    max_batched_tokens: PositiveInt = Field(default=DEFAULT_MAX_BATCHED_TOKENS,
                                            description="Most tokens one iteration carries (chunked prefill).")

    @model_validator(mode="after")
    def _check_load(self) -> ServingLayout:
        if self.request_rate is not None and self.batching != "continuous":
            raise ValueError("request_rate needs batching 'continuous': static batching has no arrival process")
        return self

    @property
    def gpus_total(self) -> int:
        return self.tp * self.pp if self.gpus is None else self.gpus

    @property
    def replicas(self) -> int:
        return max(self.gpus_total // (self.tp * self.pp), 1)

    @property
    def request_rate_per_replica(self) -> float:
        """0 for a closed loop."""
        return 0.0 if self.request_rate is None else self.request_rate / self.replicas
