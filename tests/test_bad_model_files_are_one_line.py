"""A model folder's or a statistics file's values that no model has end in one line (exit 2), never an internal
error (issue 41, still open from round 3): config values of the wrong kind (``rope_theta: "abc"``,
``model_type: ["llama"]``), heads that do not divide the hidden size, a chat template that fails or is not text,
statistics with negative or non-float sums."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import save_file

from mathneuro_edit.cli.main import main
from tests._models import save_tiny


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    return result.exit_code, (lines[-1] if lines else "")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("bad-model") / "base", "llama")


def _variant(tiny: Path, tmp_path: Path, change: Callable[[dict], object], name: str = "config.json") -> Path:
    folder = tmp_path / "base"
    shutil.copytree(tiny, folder)
    data = json.loads((folder / name).read_text())
    change(data)
    (folder / name).write_text(json.dumps(data))
    (folder / "chat_template.jinja").unlink(missing_ok=True)  # the template read is tokenizer_config.json's
    return folder


CONFIGS = {
    "rope_theta": (lambda c: c.update(rope_theta="abc"), "rope_theta: 'abc' is not a positive number"),
    "rope_parameters": (
        lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": "abc"}),
        "rope_parameters.rope_theta: 'abc' is not a positive number",
    ),
    "model_type": (lambda c: c.update(model_type=["llama"]), "model_type: ['llama'] is not a name (a string)"),
    "rms_norm_eps": (lambda c: c.update(rms_norm_eps="x"), "rms_norm_eps: 'x' is not a positive number"),
    "tie": (lambda c: c.update(tie_word_embeddings="yes"), "tie_word_embeddings: 'yes' is not true or false"),
    "positions": (lambda c: c.update(max_position_embeddings=-1), "max_position_embeddings: -1 is not a size"),
    # issue 48: each of these ended in "internal error" (KeyError, AssertionError, AttributeError)
    "rope_type": (
        lambda c: c.update(rope_scaling={"rope_type": "weird", "factor": 2.0}),
        "rope_scaling.rope_type: 'weird' is not a rope type transformers knows",
    ),
    "rope_parameters_type": (
        lambda c: c.update(rope_parameters={"rope_type": "weird", "rope_theta": 10000.0}),
        "rope_parameters.rope_type: 'weird' is not a rope type transformers knows",
    ),
    "old_rope_type": (
        lambda c: c.update(rope_scaling={"type": "weird", "factor": 2.0}),
        "rope_scaling.type: 'weird' is not a rope type transformers knows",
    ),
    "pad_token_id": (lambda c: c.update(pad_token_id=10**12), "pad_token_id: 1000000000000 is not a token id of its"),
    "pad_token_id_text": (lambda c: c.update(pad_token_id="0"), "pad_token_id: '0' is not a token id (an integer)"),
    "dtype": (lambda c: c.update(dtype="float99"), "dtype: 'float99' is not a torch dtype name"),
    "torch_dtype": (lambda c: c.update(torch_dtype=["float16"]), "torch_dtype: ['float16'] is not a torch dtype name"),
    "text_config": (lambda c: c.update(text_config={"x": 1}), "transformers cannot build a"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
@pytest.mark.parametrize("command", ["plan", "calibrate"])
def test_a_config_value_of_the_wrong_kind_is_one_line(tiny: Path, tmp_path: Path, case: str, command: str) -> None:
    change, why = CONFIGS[case]
    folder = _variant(tiny, tmp_path, change)
    args = ["--set", f"base.model={folder}"]
    extra = ["--set", "data.samples=2", "--out", str(tmp_path / "stats"), "-q"] if command == "calibrate" else []
    code, line = _run(command, *args, *extra)
    assert code == 2 and line.startswith("error: ") and why in line, line
    assert "corrupt or edited: use the model's own" in line


def test_heads_that_do_not_divide_the_hidden_size_are_one_line(tiny: Path, tmp_path: Path) -> None:
    folder = _variant(tiny, tmp_path, lambda c: (c.update(num_attention_heads=3), c.pop("head_dim", None)))
    code, line = _run(
        "calibrate", "--set", f"base.model={folder}", "--set", "data.samples=2", "--out", str(tmp_path / "s")
    )
    assert code == 2 and "The hidden size (32) is not a multiple of the number of attention heads (3)" in line, line
    assert "check its config.json" in line


TEMPLATES = {
    "syntax": ("{% for %}", "TemplateSyntaxError"),
    "raise": ("{{ raise_exception('boom') }}", "TemplateError: boom"),
    "undefined": ("{{ messages.nope.deeper }}", "UndefinedError"),
    "sandbox": ("{{ ''.__class__.__mro__ }}", "SecurityError"),
    "arithmetic": ("{{ 1 / 0 }}", "ZeroDivisionError"),
    "not text": (42, "TypeError"),
}


@pytest.mark.parametrize("case", list(TEMPLATES))
def test_a_chat_template_that_fails_is_one_line(tiny: Path, tmp_path: Path, case: str) -> None:
    template, why = TEMPLATES[case]
    folder = _variant(tiny, tmp_path, lambda t: t.update(chat_template=template), "tokenizer_config.json")
    code, line = _run(
        "eval",
        "--set",
        f"base.model={folder}",
        "--set",
        "evaluation.chat_template=true",
        "--set",
        "evaluation.math=arithmetic",
        "--set",
        "evaluation.samples=2",
        "--set",
        "evaluation.max_new_tokens=2",
        "-q",
    )
    assert code == 2 and "the tokenizer's chat template fails on a plain conversation" in line and why in line, line
    assert "or set evaluation.chat_template: false" in line


def test_a_chat_template_list_without_templates_is_one_line(tiny: Path, tmp_path: Path) -> None:
    folder = _variant(tiny, tmp_path, lambda t: t.update(chat_template=[{"name": "default"}]), "tokenizer_config.json")
    code, line = _run(
        "calibrate", "--set", f"base.model={folder}", "--set", "data.samples=2", "--out", str(tmp_path / "s")
    )
    assert code == 2 and "cannot load its tokenizer (KeyError: 'template')" in line, line


@pytest.fixture(scope="module")
def stats(tiny: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bad-stats") / "stats"
    code, line = _run("calibrate", "--set", f"base.model={tiny}", "--set", "data.samples=2", "--out", str(out), "-q")
    assert code == 0, line
    return out


def _first(tensors: dict, kind: str) -> str:
    return sorted(k for k in tensors if k.startswith(kind))[0]


STATS = {
    "negative norm": (lambda t: t.update({(k := _first(t, "norm/")): -t[k] - 1}), "its norm sum holds a negative"),
    "nan square": (lambda t: t.update({(k := _first(t, "sq/")): t[k] * float("nan")}), "its square sum holds a"),
    "negative count": (lambda t: t.update({(k := _first(t, "count/")): -t[k] - 1}), "its token count is negative"),
    "integer norm": (lambda t: t.update({(k := _first(t, "norm/")): t[k].to(torch.int32)}), "is int32, not a float"),
    "float count": (lambda t: t.update({(k := _first(t, "count/")): t[k].double()}), "is float64, not an integer"),
}


@pytest.mark.parametrize("case", list(STATS))
def test_statistics_no_calibration_gives_are_one_line(tiny: Path, stats: Path, tmp_path: Path, case: str) -> None:
    change, why = STATS[case]
    folder = tmp_path / "stats"
    shutil.copytree(stats, folder)
    path = folder / "math.stats.safetensors"
    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    change(tensors)
    save_file(tensors, str(path), metadata=meta)
    code, line = _run(
        "mask", "--set", f"base.model={tiny}", "--stats", str(folder), "--out", str(tmp_path / "m.safetensors")
    )
    assert code == 2 and why in line and "which no calibration gives" in line, line
    assert not (tmp_path / "m.safetensors").exists()


def test_a_shard_header_nested_too_deep_is_one_line(tiny: Path, tmp_path: Path) -> None:
    import struct

    folder = tmp_path / "base"
    shutil.copytree(tiny, folder)
    header = b'{"__metadata__": {"format": "pt"}, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    header += b" " * (-len(header) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    code, line = _run(
        "calibrate", "--set", f"base.model={folder}", "--set", "data.samples=2", "--out", str(tmp_path / "s")
    )
    assert code == 2 and "model.safetensors: not a readable safetensors file (its header is nested too deep)" in line


@pytest.mark.parametrize("command", ["plan", "calibrate"])
@pytest.mark.parametrize("case", ["fifo", "deep"])
def test_a_generation_config_that_is_a_fifo_or_nested_too_deep_is_one_line(
    tiny: Path, tmp_path: Path, case: str, command: str
) -> None:
    """Issue 48: a FIFO as generation_config.json was an internal SpecialFileError when a run copied it, one
    nested 100,000 deep an internal RecursionError when transformers read it."""
    import os

    folder = _variant(tiny, tmp_path, lambda c: None)
    gen = folder / "generation_config.json"
    gen.unlink(missing_ok=True)
    if case == "fifo":
        os.mkfifo(gen)
    else:
        gen.write_text('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}")
    extra = ["--set", "data.samples=2", "--out", str(tmp_path / "stats"), "-q"] if command == "calibrate" else []
    code, line = _run(command, "--set", f"base.model={folder}", *extra)
    why = "not a regular file" if case == "fifo" else "nested too deep to be a generation_config.json"
    assert code == 2 and line.startswith(f"error: {gen}: {why}"), line


@pytest.mark.parametrize("command", ["plan", "calibrate"])
def test_an_auto_map_in_a_sub_config_is_refused_as_repository_code(tiny: Path, tmp_path: Path, command: str) -> None:
    """Issue 48: ``text_config.auto_map`` was an internal AttributeError; it asks for the repository's code."""
    folder = _variant(tiny, tmp_path, lambda c: c.update(text_config={"auto_map": {"AutoConfig": "x.Y"}}))
    extra = ["--set", "data.samples=2", "--out", str(tmp_path / "stats"), "-q"] if command == "calibrate" else []
    code, line = _run(command, "--set", f"base.model={folder}", *extra)
    assert code == 2 and "needs its own Python code (config.json's text_config has auto_map)" in line, line


@pytest.mark.parametrize("key", ["model_type", "architectures", "rope_scaling"])
def test_a_lone_surrogate_in_a_config_is_not_an_internal_error(tiny: Path, tmp_path: Path, key: str) -> None:
    """A lone surrogate (``"\\ud800"`` in the JSON: valid JSON, not UTF-8 text) in a config value: refused in one
    line, or read as any other name (a run then writes it escaped); never an internal error."""
    value = {"model_type": "llama\ud800", "architectures": ["LlamaForCausalLM\ud800"]}.get(key)
    change = (
        (lambda c: c.update(rope_scaling={"rope_type": "w\ud800"}))
        if value is None
        else (lambda c: c.update({key: value}))
    )
    folder = _variant(tiny, tmp_path, change)
    code, line = _run("plan", "--set", f"base.model={folder}")
    assert code in (0, 2) and "internal error" not in line, line
