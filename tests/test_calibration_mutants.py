"""Edges of mathneuro_edit.calibration / stats that the mutation run (scripts/mutation.sh calibration) found
unguarded: the texts fingerprint of non-ASCII text, the public model name, the tied lm_head option passed
through calibrate, and the disk-full message of ActivationStats.save."""

from __future__ import annotations

import errno
import hashlib
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from mathneuro_edit import InputError, calibrate
from mathneuro_edit.calibration import _public_name, texts_sha256

from ._tiny import MATH, build


def test_texts_fingerprint_is_the_sha256_of_the_utf8_json_list() -> None:
    # written out by hand: the JSON text of the list, non-ASCII characters as themselves (not \\u escapes)
    assert texts_sha256(["café", "1 + 1 = 2"]) == hashlib.sha256('["café", "1 + 1 = 2"]'.encode("utf-8")).hexdigest()
    assert texts_sha256(["a", "b"]) != texts_sha256(["b", "a"])


@pytest.mark.parametrize("name, public", [
    ("", ""),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("./models/mine", "<local>"),
    ("~/models/mine", "<local>"),
    ("/abs/path/model", "<local>"),
])
def test_public_model_name_hides_local_paths(name: str, public: str) -> None:
    from mathneuro_edit.recipe import LOCAL

    assert LOCAL == "<local>"
    assert _public_name(name) == public


def test_calibrate_passes_include_tied_lm_head_through() -> None:
    model, tok = build("gemma2")  # tied lm_head
    texts = MATH[:3]
    plain = calibrate(model, tok, texts, progress=False)
    assert "lm_head.weight" not in plain.targets
    stats = calibrate(model, tok, texts, progress=False, include_tied_lm_head=True)
    assert "lm_head.weight" in stats.targets
    # reference: the lm_head's input, one text at a time: sum over texts of each feature's L2 norm over tokens
    ref = torch.zeros(model.lm_head.weight.shape[1], dtype=torch.float64)
    seen: list[torch.Tensor] = []
    handle = model.lm_head.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    try:
        with torch.no_grad():
            for t in texts:
                model(input_ids=torch.tensor([tok(t)["input_ids"]]), use_cache=False)
                ref += seen.pop()[0].double().pow(2).sum(0).sqrt()
    finally:
        handle.remove()
    assert torch.allclose(stats.norm_sum["lm_head.weight"][0].double(), ref, rtol=1e-4, atol=1e-5)
    # the other targets are the same with or without the head
    for name in plain.targets:
        assert torch.equal(stats.norm_sum[name], plain.norm_sum[name]), name


def test_stats_save_on_a_full_disk_names_the_file_and_the_bytes_it_needs(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = build("llama")
    stats = calibrate(model, tok, MATH[:2], progress=False)
    needed = sum(stats.norm_sum[n].numel() * 4 + stats.sq_sum[n].numel() * 4 + stats.token_count[n].numel() * 8
                 for n in stats.norm_sum)  # float32, float32, int64
    # make it need more than 1 MB, so the message's number tells the sizes apart
    big = 3 * 10**6 // 4
    stats.norm_sum["pad"], stats.sq_sum["pad"] = torch.zeros(1, big), torch.zeros(1, big)
    stats.token_count["pad"] = torch.zeros(1, dtype=torch.int64)
    needed += 2 * big * 4 + 8

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("mathneuro_edit.stats.save_file", full)
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr("mathneuro_edit.outdir.shutil.disk_usage", lambda p: Usage(10**9, 10**9, 0))
    path = tmp_path / "math.stats.safetensors"
    with pytest.raises(InputError) as err:
        stats.save(path)
    mb = -(-needed // 10**6)
    assert mb >= 7 and str(err.value) == f"no space left on device writing {path}; free {mb} MB or choose another --out"
    assert list(tmp_path.iterdir()) == []
