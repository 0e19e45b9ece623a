"""GGUF export of rope variants: Phi-3 / Phi-4-mini's longrope factors, and SmolLM3's NoPE layers.

transformers rotates with the short factors up to ``original_max_position_embeddings`` tokens and with the long
ones beyond; llama.cpp picks one set when its context is created (long when the context exceeds the original).
The families test (tests/runs/test_families.py) runs short prompts in a short context: the short factors. Here a
prompt longer than the original context, in a long context, must give transformers' logits: the long factors and
the attention factor. The tiny model is the family matrix's Phi-4-mini shape (original context 512, max 1024).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import tests._families as fam  # noqa: E402
from mathneuro_edit import InputError  # noqa: E402
from mathneuro_edit.weights.gguf_tensors import gguf_plan  # noqa: E402
from mathneuro_edit.weights.gguf_writer import write_gguf  # noqa: E402
from tests._family_shapes import family_shape  # noqa: E402
from tests._llama_cpp import logit_gap  # noqa: E402
from tests.weights.test_gguf import _llama  # noqa: E402

PHI = family_shape("Phi-3 / Phi-4")


def _phi(tmp_path):
    return fam.save_family_base(tmp_path / "base", PHI)


def test_the_factors_and_the_attention_factor_are_the_config_s(tmp_path) -> None:
    base = _phi(tmp_path)
    r = gguf.GGUFReader(str(write_gguf(base, tmp_path / "m.gguf", "Q8_0", name="phi")))
    t = {x.name: x for x in r.tensors}
    rope = PHI.kwargs["rope_parameters"]
    for which in ("long", "short"):
        assert t[f"rope_factors_{which}.weight"].tensor_type.name == "F32"
        np.testing.assert_array_equal(
            np.asarray(t[f"rope_factors_{which}.weight"].data), np.asarray(rope[f"{which}_factor"], dtype=np.float32)
        )
    assert r.fields["phi3.rope.scaling.original_context_length"].contents() == 512
    want = math.sqrt(1 + math.log(1024 / 512) / math.log(512))  # transformers' longrope attention factor
    assert r.fields["phi3.rope.scaling.attn_factor"].contents() == pytest.approx(want, rel=1e-7)


def test_llama_cpp_gives_transformers_logits_beyond_the_original_context(tmp_path) -> None:
    """A 560-token prompt (> 512): transformers switches to the long factors, llama.cpp (context 1024) uses them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    base = _phi(tmp_path)
    llm = _llama(write_gguf(base, tmp_path / "m.gguf", "F32", name="phi"), n_ctx=1024)
    tok = AutoTokenizer.from_pretrained(base)
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    ids = (tok("Question: Tom has 3 apples and buys 4 more. How many now? Answer: 7.").input_ids * 40)[:560]
    assert len(ids) == 560
    assert logit_gap(llm, ref, ids) < 1e-3


def test_longrope_without_one_factor_per_rotary_frequency_is_refused(tmp_path) -> None:
    import json

    base = _phi(tmp_path)  # transformers itself refuses to build such a config: a hand-edited config.json
    cfg = json.loads((base / "config.json").read_text())
    cfg["rope_parameters"]["long_factor"] = [1.0, 2.0]
    (base / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        InputError,
        match=r"^outputs\.gguf: longrope needs original_max_position_embeddings and 6 "
        r"long_factor and short_factor values \(one per rotary frequency\)",
    ):
        gguf_plan(base, "F32")


def test_longrope_outside_phi3_is_refused(tmp_path) -> None:
    import json

    base = fam.save_family_base(tmp_path / "base", family_shape("Mistral"))
    cfg = json.loads((base / "config.json").read_text())
    cfg["rope_parameters"] = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "long_factor": [1.0] * 8,
        "short_factor": [1.0] * 8,
        "original_max_position_embeddings": 128,
    }
    (base / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(
        InputError,
        match=r"^outputs\.gguf: rope scaling 'longrope' is not supported for mistral "
        r"\(linear, yarn, llama3; longrope for phi3\); set outputs\.gguf: null$",
    ):
        gguf_plan(base, "F32")


def test_smollm3_with_another_nope_pattern_is_refused_and_llama_cpp_would_differ(tmp_path, monkeypatch) -> None:
    """llama.cpp's smollm3 skips the rotary in every 4th layer whatever the config says: a config with NoPE in
    layer 1 instead is refused from config.json, and with the refusal bypassed llama.cpp's logits leave the
    families test's tolerance (the refusal is needed)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mathneuro_edit.weights import gguf_arch
    from mathneuro_edit.weights.gguf_arch import gguf_refusal

    shape = family_shape("SmolLM3")
    assert gguf_refusal(shape.config().to_dict()) is None  # the released pattern (every 4th layer) is written
    odd = dataclasses.replace(shape, kwargs={**shape.kwargs, "no_rope_layers": [1, 0, 1, 1]})
    assert gguf_refusal(odd.config().to_dict()) == (
        "outputs.gguf: this smollm3 config cannot be run by llama.cpp as transformers runs it: its NoPE layers are "
        "[1] but llama.cpp's SMOLLM3 skips the rotary in every 4th layer ([3]); set outputs.gguf: null (the "
        "checkpoint holds the edit)"
    )
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    base = fam.save_family_base(tmp_path / "base", odd)
    family = gguf_arch.FAMILIES["smollm3"]
    monkeypatch.setitem(gguf_arch.FAMILIES, "smollm3", dataclasses.replace(family, refusal_reason=lambda cfg: None))
    llm = _llama(write_gguf(base, tmp_path / "m.gguf", "F32", name="x"))
    tok = AutoTokenizer.from_pretrained(base)
    ref = AutoModelForCausalLM.from_pretrained(base).eval()
    ids = tok("Question: Tom has 3 apples and buys 4 more.").input_ids
    assert logit_gap(llm, ref, ids) > 1e-3


def test_a_phi3_name_without_phi3_s_special_tokens_is_refused_and_llama_cpp_would_not_load_it(
    tmp_path, monkeypatch
) -> None:
    """llama.cpp gives Phi-3's special tokens strip attributes when general.name holds "phi3" / "phi-3", and fails
    to load a file whose vocabulary lacks one of them: such a name is refused; the default name loads."""
    from mathneuro_edit.weights import gguf_vocab

    base = _phi(tmp_path)  # the organism's byte-level BPE: no <unk>, no <|endoftext|>
    with pytest.raises(
        InputError,
        match=r"^outputs\.gguf: general\.name 'my-phi3-math' makes llama\.cpp look up "
        r"Phi-3's special tokens </s>, <unk>, <s>, <\|endoftext\|>, and this "
        r"tokenizer lacks <unk>, <\|endoftext\|>: llama\.cpp would fail to load the file",
    ):
        write_gguf(base, tmp_path / "m.gguf", "F32", name="my-phi3-math")
    if importlib.util.find_spec("llama_cpp") is None:
        _llama(tmp_path / "none.gguf")  # skips, or fails where MATHNEURO_EDIT_REQUIRE_LLAMA_CPP=1 (CI)
    _llama(write_gguf(base, tmp_path / "default.gguf", "F32"))  # the default name: "local model"
    monkeypatch.setattr(gguf_vocab, "name_refusal", lambda name, tok: None)
    with pytest.raises(ValueError, match="Failed to load model"):
        _llama(write_gguf(base, tmp_path / "phi3.gguf", "F32", name="my-phi3-math"))


def test_a_phi3_name_is_refused_with_the_other_gguf_refusals(tmp_path) -> None:
    """The run's GGUF name (the base's Hub id) is checked with the other GGUF refusals (which a run's export step
    makes before it writes the checkpoint)."""
    from mathneuro_edit.weights.gguf_writer import check_gguf, gguf_public_name

    base = _phi(tmp_path)
    with pytest.raises(InputError, match=r"^outputs\.gguf: general\.name 'someone/phi3-math \(MathNeuro edit\)'"):
        check_gguf(base, "Q8_0", name=gguf_public_name("someone/phi3-math"))
