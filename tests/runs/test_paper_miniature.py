"""The paper's claims, in miniature, on the shipped organism (top_k 5%): see docs/results.md for the numbers."""

from __future__ import annotations

import pytest

from mathneuro_edit.organism import organism_path

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (organism_path() / "model.safetensors").is_file(), reason="organism model not built"),
]


@pytest.fixture(scope="module")
def result():
    from tests._paper_miniature import run_miniature

    return run_miniature(top_k=0.05, n_calib=100, n_eval=100)


def test_base_organism_is_good_at_math(result):
    assert result.base_accuracy >= 0.5, result.to_markdown()


def test_mathneuro_prune_deletes_math_and_keeps_general(result):
    assert result.relative_accuracy_drop("MathNeuro prune") >= 0.8, result.to_markdown()
    assert result.relative_loss_rise("MathNeuro prune") <= 0.05, result.to_markdown()


def test_random_prune_of_same_count_leaves_math(result):
    e = result.edits["random prune (same count)"]
    assert e["selected"] == result.edits["MathNeuro prune"]["selected"]
    assert abs(e["math_accuracy"] - result.base_accuracy) <= 0.05, result.to_markdown()


def test_wanda_only_hurts_general_more_than_mathneuro(result):
    assert result.relative_loss_rise("Wanda-only prune (math top-K)") > result.relative_loss_rise("MathNeuro prune")


def test_one_sample_gives_most_of_the_effect(result):
    assert result.one_sample_overlap >= 0.3, result.one_sample_overlap
    assert result.relative_accuracy_drop("MathNeuro prune, 1 sample per set") >= 0.5, result.to_markdown()
