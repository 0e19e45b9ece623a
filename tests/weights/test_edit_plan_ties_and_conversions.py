"""The edit plan's reading of tied weights and weight conversions (round 4 of hand mutations, docs/testing.md
"Round 4"; each failed with the mutation its docstring names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_a_config_without_tie_word_embeddings_ties_as_transformers_does(tmp_path: Path) -> None:
    """r4-edit-plan-untied-by-default: GPT-2's own config.json has no ``tie_word_embeddings`` (transformers'
    default: tied); a checkpoint that stores the tied head as a second copy has both copies edited, as
    :func:`plan_edits` says ("a tied copy stored twice is edited twice")."""
    import torch
    import transformers
    from safetensors.torch import save_file

    from mathneuro_edit.engine.mask import Mask
    from mathneuro_edit.weights.checkpoint import open_checkpoint
    from mathneuro_edit.weights.edit_plan import plan_edits

    cfg = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8)
    model = transformers.GPT2LMHeadModel(cfg)
    assert model.lm_head.weight is model.transformer.wte.weight  # what transformers does without the key
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = state["transformer.wte.weight"].clone()  # the tied copy, stored twice
    save_file(state, str(tmp_path / "model.safetensors"))
    config = cfg.to_dict()
    config.pop("tie_word_embeddings", None)
    config["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    mask = Mask({"transformer.wte.weight": torch.rand(16, 8, generator=torch.Generator().manual_seed(0)) < 0.3})
    plan = plan_edits(open_checkpoint(tmp_path), mask)
    assert set(plan.edits) == {"transformer.wte.weight", "lm_head.weight"}


def test_a_conversion_that_moves_entries_within_one_shape_is_not_a_rename(monkeypatch: pytest.MonkeyPatch) -> None:
    """r4-edit-plan-permutation-as-rename: a conversion of one tensor to one tensor of the same shape is a plain
    rename only when every entry stays in place; one that moves entries (a transposed square, reordered rows) is
    a re-layout, whose mask must be converted too."""
    import transformers.core_model_loading as conversion

    from mathneuro_edit.weights.edit_plan import _is_identity

    moves = {"rename": lambda t: t, "rows reversed": lambda t: t.flip(0), "transposed": lambda t: t.T.contiguous()}
    for how, move in moves.items():
        monkeypatch.setattr(
            conversion, "revert_weight_conversion", lambda model, d, move=move: {k: move(v) for k, v in d.items()}
        )
        assert _is_identity(None, "w", (4, 4)) is (how == "rename"), how
