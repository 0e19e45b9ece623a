"""plan's sizes against what the files store: the mask's bits, the checkpoint at outputs.dtype, the 8% each device
keeps free (round 4 of hand mutations, docs/testing.md "Round 4"; each failed with the mutation its docstring
names)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("numel", [1, 7, 9, 1001, 4097, 65_535])
@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.2, 0.5, 1.0])
def test_the_plan_s_mask_bytes_are_what_a_mask_stores(numel: int, fraction: float) -> None:
    """r4-plan-mask-bits-floor: the plan sizes a mask by the Mask class's own rule; compared here with what a real
    Mask stores (``ceil(numel / 8)`` bytes of bits for a tensor whose size is not a multiple of 8)."""
    import torch

    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.runs.plan_memory import mask_file_bytes

    selected = round(fraction * numel)
    flat = torch.zeros(numel, dtype=torch.bool)
    flat[torch.randperm(numel, generator=torch.Generator().manual_seed(numel))[:selected]] = True
    mask = Mask({"w": flat})
    _, data = mask._store["w"]
    assert mask_file_bytes(numel, selected) == data.numel() * data.element_size()


_CFG = dict(
    model_type="llama",
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    tie_word_embeddings=False,
)


@pytest.mark.parametrize(("output_dtype", "nbytes"), [("bfloat16", 2), ("float16", 2), ("float32", 4)])
def test_the_planned_checkpoint_is_stored_in_outputs_dtype(output_dtype: str, nbytes: int) -> None:
    """r4-plan-checkpoint-in-load-dtype: the edited checkpoint's size is its parameters at ``outputs.dtype``
    (the release's stored dtype), whatever dtype the run loads the base in."""
    from mathneuro_edit.runs.plan import PlanSettings, plan_from_config

    plan = plan_from_config(_CFG, PlanSettings(dtype="float32", output_dtype=output_dtype))
    assert plan.checkpoint_bytes == plan.n_params * nbytes
    assert plan.weights_bytes == plan.n_params * 4  # loaded in float32


@pytest.mark.parametrize(
    ("need_gb", "said"),
    [
        (14.0, "fits one 16 GB device"),  # 14 <= 0.92 x 16
        (15.5, "fits one 24 GB device"),  # over 92% of 16 GB: the allocator and the CUDA context need room
        (23.0, "fits one 40 GB device"),  # over 0.92 x 24 = 22.08
        (100.0, "fits one 141 GB device, or 2 x 80 GB or 1 x 141 GB"),  # ceil(100 / 73.6), ceil(100 / 129.72)
        (140.0, "fits one 192 GB device, or 2 x 80 GB or 2 x 141 GB"),  # over 0.92 x 141 = 129.72
    ],
)
def test_where_calibration_fits_leaves_8_percent_of_each_device_free(need_gb: float, said: str) -> None:
    """r4-plan-fits-no-headroom: a device fits when the calibration peak is at most 92% of it (the rest is the
    allocator's, the CUDA context's and the uneven layer split's); the split counts use the same 92%."""
    from dataclasses import replace

    from mathneuro_edit.runs.plan import PlanSettings, plan_from_config

    plan = replace(plan_from_config(_CFG, PlanSettings()), calibration_peak_bytes=int(need_gb * 1e9))
    assert plan.fits().startswith(said), plan.fits()
