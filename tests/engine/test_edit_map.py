"""Edits with structure: which scale (or top_k) a matrix takes under a map (engine.edit_map), and the map's rules.

Milliseconds: pure functions of names and numbers.
"""

from __future__ import annotations

import pytest

from mathneuro_edit.engine.edit_map import (
    check_map,
    matrix_place,
    parse_key,
    setting_values,
    show_setting,
    unmatched_keys,
    value_for,
)

LLAMA = "model.layers.{}.{}.{}.weight"
SPEC = {
    "default": 1.05,
    "mlp": 1.1,
    "q_proj": 1.3,
    "layers 0-1": 1.0,
    "layers 2-3 attention": 0.9,
    "layers 3 down_proj": 0.0,
}


@pytest.mark.parametrize(
    "layer,component,proj,want",
    [
        (0, "mlp", "up_proj", 1.0),  # band beats component
        (0, "self_attn", "q_proj", 1.0),  # band beats projection
        (2, "self_attn", "q_proj", 0.9),  # band and component beat projection
        (2, "self_attn", "k_proj", 0.9),
        (3, "mlp", "down_proj", 0.0),  # band and projection: the most specific
        (3, "mlp", "up_proj", 1.1),  # the component outside every band key of its own
        (5, "self_attn", "q_proj", 1.3),  # projection beats component
        (5, "self_attn", "o_proj", 1.05),  # no component key for attention outside 2-3: default
    ],
)
def test_the_most_specific_key_wins(layer, component, proj, want) -> None:
    assert value_for(SPEC, LLAMA.format(layer, component, proj)) == want


def test_a_matrix_in_no_layer_takes_only_keys_without_a_band() -> None:
    assert value_for(SPEC, "lm_head.weight") == 1.05
    assert value_for({"default": 1.0, "lm_head": 2.0, "layers 0-99": 3.0}, "lm_head.weight") == 2.0


def test_a_number_is_every_matrix_s_value() -> None:
    assert value_for(1.1, "anything.weight") == 1.1
    assert setting_values(0.05) == [0.05] and show_setting(0.05) == f"{0.05:g}"


@pytest.mark.parametrize(
    "name,place",
    [
        ("model.layers.3.self_attn.q_proj.weight", (3, "attention", "q_proj")),
        ("model.layers.11.mlp.down_proj.weight", (11, "mlp", "down_proj")),
        ("transformer.h.0.attn.c_attn.weight", (0, "attention", "c_attn")),
        ("model.layers.2.block_sparse_moe.experts.5.w1.weight", (2, "mlp", "w1")),
        ("lm_head.weight", (None, None, "lm_head")),
    ],
)
def test_a_parameter_name_places_its_matrix(name, place) -> None:
    assert matrix_place(name) == place


@pytest.mark.parametrize(
    "spec,words",
    [
        ({}, "an empty map"),
        ({"mlp": 1.1}, "needs a default"),
        ({"default": 1, "layers 3-1": 2}, "ends before it starts"),
        ({"default": 1, "layers 0-5": 2, "layers 5-9": 3}, "overlap (layer 5)"),
        ({"default": 1, "layers 0-5 mlp": 2, "layers 4-9 mlp": 3}, "overlap (layers 4-5)"),
        ({"default": 1, "layers": 2}, "is not default"),
        ({"default": 1, "layers 0-5 mlp up": 2}, "is not default"),
        ({"default": 1, "0-5": 2}, "is not default"),
    ],
)
def test_a_bad_map_is_refused_with_its_reason(spec, words) -> None:
    with pytest.raises(ValueError, match=None) as e:
        check_map(spec)
    assert words in str(e.value)


def test_bands_of_different_parts_may_overlap() -> None:
    check_map({"default": 1, "layers 0-5": 1.0, "layers 2-3 mlp": 1.2, "layers 0-9 q_proj": 1.1})
    assert parse_key("layers  4 ") == parse_key("layers 4-4")


def test_a_key_that_matches_no_matrix_is_named() -> None:
    names = [LLAMA.format(i, c, p) for i in range(2) for c, p in (("self_attn", "q_proj"), ("mlp", "up_proj"))]
    assert unmatched_keys({"default": 1, "q_porj": 2, "layers 5-6": 3, "mlp": 1.1}, names) == ["q_porj", "layers 5-6"]
    assert unmatched_keys(1.1, names) == []


def test_a_map_reads_in_rank_order() -> None:
    assert show_setting(SPEC) == (
        "default 1.05, mlp 1.1, q_proj 1.3, layers 0-1 1, layers 2-3 attention 0.9, layers 3 down_proj 0"
    )
