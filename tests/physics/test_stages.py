"""Pipeline geometry: layers per stage, micro-batches in flight, the bubble fraction.

Every expected value is worked out by hand in the comments (Narayanan et al. 2021 Sec. 2.2;
Korthikanti et al. 2022 Sec. 4.2.3; Dubey et al. 2024 Sec. 3.3.2 for the uneven Llama 3 split).
"""

from __future__ import annotations

import numpy as np
import pytest

from planner.physics.stages import (
    bubble_fraction,
    first_layer_of_stage,
    layers_on_stage,
    max_layers_per_stage,
    microbatches_in_flight,
)
from planner.specs.layout import Layout


def stages_of(layout: Layout) -> tuple:
    return layout.to_arrays(), np.arange(layout.pp)


# Layers per stage -------------------------------------------------------------------------------
def test_llama3_405b_126_layers_on_16_stages():
    # 126 = 16 * 7 + 14: every stage gets 7, the 14 spare layers go to the 14 middle stages (1..14),
    # so the first and last stages keep one fewer (they also hold the embedding and the LM head):
    # [7, 8 x 14, 7]; 7 + 14*8 + 7 = 126.
    layers = layers_on_stage(126, np.int64(16), np.arange(16))
    assert layers.tolist() == [7] + [8] * 14 + [7]


def test_ten_layers_on_four_stages():
    # 10 = 4 * 2 + 2: the two spare layers go to the middle stages 1 and 2: [2, 3, 3, 2].
    assert layers_on_stage(10, np.int64(4), np.arange(4)).tolist() == [2, 3, 3, 2]


def test_eleven_layers_on_four_stages_last_takes_the_third_spare():
    # 11 = 4 * 2 + 3: only two middle stages exist, so the third spare goes to the last stage:
    # [2, 3, 3, 3]; sum 11.
    assert layers_on_stage(11, np.int64(4), np.arange(4)).tolist() == [2, 3, 3, 3]


def test_even_split_and_one_stage():
    # 8 layers on 4 stages: 2 each. pp = 1: the only stage holds every layer.
    assert layers_on_stage(8, np.int64(4), np.arange(4)).tolist() == [2, 2, 2, 2]
    assert layers_on_stage(10, np.int64(1), np.arange(1)).tolist() == [10]


def test_first_layer_of_each_stage():
    # [2, 3, 3, 2] -> first layers 0, 2, 5, 8. Llama 3: stage 1 starts after 7, stage 15 after 7 + 14*8 = 119.
    assert first_layer_of_stage(10, np.int64(4), np.arange(4)).tolist() == [0, 2, 5, 8]
    starts = first_layer_of_stage(126, np.int64(16), np.arange(16))
    assert starts[0] == 0 and starts[1] == 7 and starts[15] == 119


def test_max_layers_per_stage_is_the_ceiling():
    # ceil(126/16) = 8, ceil(10/4) = 3, ceil(8/4) = 2.
    assert max_layers_per_stage(126, np.array([16, 4])).tolist() == [8, 32]
    assert max_layers_per_stage(10, np.int64(4)) == 3
    assert max_layers_per_stage(8, np.int64(4)) == 2


# Micro-batches in flight ------------------------------------------------------------------------
def test_1f1b_stage_i_holds_p_minus_i():
    # p = 4, m = 8 micro-batches (global 8 / (dp 1 * micro 1)): min(4 - i, 8) = [4, 3, 2, 1].
    lay, stages = stages_of(Layout(pp=4, global_batch=8, seq_len=16))
    assert microbatches_in_flight(lay, stages).tolist() == [4, 3, 2, 1]


def test_1f1b_with_fewer_micro_batches_than_stages():
    # p = 4, m = 2: min(4 - i, 2) = [2, 2, 2, 1].
    lay, stages = stages_of(Layout(pp=4, global_batch=2, seq_len=16))
    assert microbatches_in_flight(lay, stages).tolist() == [2, 2, 2, 1]


def test_interleaved_in_flight():
    # p = 4, v = 2, m = 8: p + (p - 1 - 2i)/v = 4 + (3 - 2i)/2 = [5.5, 4.5, 3.5, 2.5];
    # at i = 0 this is Korthikanti's p (1 + (p - 1)/(p v)) = 4 (1 + 3/8) = 5.5.
    lay, stages = stages_of(Layout(pp=4, interleave=2, global_batch=8, seq_len=16))
    assert microbatches_in_flight(lay, stages).tolist() == pytest.approx([5.5, 4.5, 3.5, 2.5])


def test_a_larger_micro_batch_group_warms_up_more_chunks():
    # p = 4, v = 2, m = 10 in groups of n = 5 (Megatron-Core's schedule warms up 2(p - i - 1) + (v - 1) n chunks):
    # rank 0: (6 + 5 + 1) / 2 = 6; rank 3: (0 + 5 + 1) / 2 = 3. With n = p it is the default's [5.5, ..., 2.5].
    lay, stages = stages_of(Layout(pp=4, interleave=2, global_batch=10, seq_len=16, microbatch_group_size=5))
    assert microbatches_in_flight(lay, stages).tolist() == pytest.approx([6, 5, 4, 3])
    same, _ = stages_of(Layout(pp=4, interleave=2, global_batch=8, seq_len=16, microbatch_group_size=4))
    assert microbatches_in_flight(same, stages).tolist() == pytest.approx([5.5, 4.5, 3.5, 2.5])
    assert bubble_fraction(lay)[0] == pytest.approx(3 / (2 * 10))  # (p - 1) / (v m), whatever n


def test_interleaved_capped_by_the_micro_batch_count():
    # p = 4, v = 2, m = 4: the warm-up would want 5.5 but only 4 micro-batches exist: [4, 4, 3.5, 2.5].
    lay, stages = stages_of(Layout(pp=4, interleave=2, global_batch=4, seq_len=16))
    assert microbatches_in_flight(lay, stages).tolist() == pytest.approx([4, 4, 3.5, 2.5])


def test_interleaved_counts_megatron_cores_warm_up_at_llama3_405b_scale():
    # Llama 3 405B as Meta trained it (Dubey et al. 2024, Sec. 3.3.2): p 16, dp 128, 2,048 sequences -> m = 16;
    # taken with v = 4. Megatron-Core's get_pp_rank_microbatches (schedules.py @ d98e8a64) warms up
    # 2 (p - r - 1) + (v - 1) p = 78 - 2r chunk-micro-batches, all m v = 64 when that reaches 64 (r <= 7): those
    # ranks hold every micro-batch, 16. Rank 8: 62 + 1 = 63 chunks / 4 = 15.75; rank 15: 48 + 1 = 49 / 4 = 12.25.
    lay, stages = stages_of(Layout(pp=16, dp=128, interleave=4, global_batch=2048, seq_len=16))
    held = microbatches_in_flight(lay, stages).tolist()
    assert held[:8] == [16] * 8
    assert held[8] == pytest.approx(15.75) and held[15] == pytest.approx(12.25)


def test_gpipe_holds_every_micro_batch():
    # GPipe runs all m forwards before any backward: every stage holds m = 6.
    lay, stages = stages_of(Layout(pp=3, schedule="gpipe", global_batch=6, seq_len=16))
    assert microbatches_in_flight(lay, stages).tolist() == [6, 6, 6]


def test_no_pipeline_holds_one_micro_batch():
    # pp = 1: gradient accumulation runs one micro-batch at a time, whatever m is (here 16, dp 2 x micro 2 x 4).
    lay, stages = stages_of(Layout(pp=1, dp=2, micro_batch=2, global_batch=16, seq_len=16))
    assert microbatches_in_flight(lay, stages).tolist() == [1]


def test_micro_batch_count_is_global_over_dp_times_micro():
    # 256 / (dp 4 * micro 2) = 32.
    assert Layout(dp=4, micro_batch=2, global_batch=256, seq_len=16).to_arrays().num_micro_batches.tolist() == [32]


# Bubble fraction --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "pp, interleave, global_batch, expected",
    [
        (4, 1, 8, 3 / 8),  # (p - 1)/m = 3/8
        (4, 2, 8, 3 / 16),  # divided by v = 2
        (8, 1, 64, 7 / 64),
        (1, 1, 8, 0.0),  # no pipeline, no bubble
    ],
)
def test_bubble_fraction(pp, interleave, global_batch, expected):
    lay = Layout(pp=pp, interleave=interleave, global_batch=global_batch, seq_len=16).to_arrays()
    assert bubble_fraction(lay).tolist() == pytest.approx([expected])


def test_mtp_layers_sit_on_the_last_stage_only():
    from planner.physics.stages import mtp_layers_on_stage

    # the layout's -1 means the model's count; 0 switches MTP off; every module on stage p - 1
    model_default = Layout(pp=4, global_batch=8, seq_len=16).to_arrays()
    assert mtp_layers_on_stage(1, model_default, np.arange(4)).tolist() == [0, 0, 0, 1]
    off = Layout(pp=4, global_batch=8, seq_len=16, mtp_layers=0).to_arrays()
    assert mtp_layers_on_stage(1, off, np.arange(4)).tolist() == [0, 0, 0, 0]
    two = Layout(pp=1, global_batch=8, seq_len=16, mtp_layers=2).to_arrays()
    assert mtp_layers_on_stage(0, two, np.arange(1)).tolist() == [2]


def test_dualpipe_candidates_are_the_pairs_with_the_most_layers():
    # 61 layers on 16 stages: stages 1..13 carry 4, the rest 3 (layers_on_stage). Pair (r, 15 - r) holds
    # 8 layers from r = 2 (both long) to the middle pair r = 7; the candidates are 2 and 7.
    from planner.physics.stages import dualpipe_candidate_stages, layers_on_stage

    pp = np.array([16])
    got = dualpipe_candidate_stages(61, pp)[:, 0].tolist()
    assert got == [2, 7]
    pairs = [int(layers_on_stage(61, pp, np.array([r]))[0] + layers_on_stage(61, pp, np.array([15 - r]))[0])
             for r in range(8)]
    assert max(pairs) == pairs[2] == pairs[7] == 8
