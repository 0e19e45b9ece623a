"""Behaviours of the newest modules that no test pinned before issue 41's round 4 of hand mutations
(``scripts/hand_mutations.py r4-...``, docs/testing.md "Round 4"): each test compares against an independent,
simple computation or a documented rule, and failed with the mutation named in its docstring.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe

# --------------------------------------------------------------------------------------------------- runs/sweep


def test_two_variants_that_differ_only_in_the_data_seed_calibrate_their_own_sets() -> None:
    """r4-sweep-calib-set-ignores-seed: a calibration set is its source *and* how it is sampled; a variant with
    another ``data.seed`` draws other texts, so it must not reuse the recipe's statistics."""
    from mathneuro_edit.runs.sweep.calibration import _set_count
    from mathneuro_edit.runs.sweep.grid import _variants

    recipe = quickstart_recipe(["sweep.variants=[{name: s1, set: ['data.seed=1']}]"])
    sets = 1 + len(recipe.data.general)  # math, then each general set
    assert _set_count(_variants(recipe)) == 2 * sets
    same = quickstart_recipe(["sweep.variants=[{name: mlp, set: ['targets.include=[mlp]']}]"])
    assert _set_count(_variants(same)) == sets  # targets only: the same texts, calibrated once


class _Mask:
    def total(self) -> tuple[int, int]:
        return 40, 1000


def test_a_point_s_base_count_is_the_base_s_on_the_same_problems() -> None:
    """r4-sweep-point-base-count-all: a point of an early round saw only the first problems; its gain over the base
    (the front's merit) compares it with the base on those same problems, not on all of them."""
    from mathneuro_edit.runs.sweep.grid import _Arm, _sweep_point

    arm = _Arm(0, 0.05, 1.1, _Mask(), correct=[True, False], general={"loss_sums": [1.0, 2.0], "kl": 0.01}, round=1)
    base_general = {"loss_sums": [1.0, 2.0], "tokens": [3, 4]}
    point = _sweep_point(arm, "", [False, False, True, True], base_general)
    assert (point.math_correct, point.math_total, point.base_correct) == (1, 2, 0)
    assert point.gain_points == pytest.approx(100 * (1 - 0) / 2)


def test_no_worked_example_is_also_a_confirmation_problem(tmp_path: Path) -> None:
    """r4-sweep-confirmation-repeats-shots: a confirmation problem whose question repeats a worked example is
    dropped as one that repeats a selection problem is (the prompt would hold its own answer)."""
    from mathneuro_edit.runs.sweep.problems import sweep_problems

    path = tmp_path / "probs.jsonl"
    rows = [{"question": f"q{i % 7}", "answer": f"#### {i % 7}"} for i in range(40)]  # 7 distinct questions
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for seed in range(5):
        r = quickstart_recipe(
            [
                f"evaluation.math={path}",
                "evaluation.n_shot=3",
                f"evaluation.seed={seed}",
                "sweep.selection_samples=2",
                "sweep.confirmation_samples=30",
            ]
        )
        shots, sel, conf = sweep_problems(r)
        earlier = {p["question"] for p in shots + sel}
        assert len(shots) == 3 and len(sel) == 2
        assert not earlier & {p["question"] for p in conf}, seed


def _exact_two_sided(b: int, k: int) -> float:
    """The two-sided exact McNemar p by its definition: twice the smaller binomial(n, 1/2) tail, at most 1."""
    n = b + k
    return 1.0 if n == 0 else min(1.0, 2 * sum(math.comb(n, i) for i in range(min(b, k) + 1)) / 2**n)


def test_the_sweep_file_s_p_value_is_the_two_sided_exact_mcnemar() -> None:
    """r4-evidence-exact-p-one-sided: read_sweep re-tests a shared file's counts with the two-sided p the sweep
    itself uses (evaluation.significance.mcnemar_exact), never a one-sided one (half of it)."""
    from mathneuro_edit.evaluation.significance import mcnemar_exact
    from mathneuro_edit.runs.sweep.evidence import _exact_p

    for b in range(0, 25):
        for k in range(0, 25):
            assert _exact_p(b, k) == pytest.approx(_exact_two_sided(b, k), rel=1e-12), (b, k)
            assert _exact_p(b, k) == pytest.approx(mcnemar_exact(b, k), rel=1e-9), (b, k)


def test_a_sweep_file_whose_counts_are_significant_only_one_sided_is_refused(tmp_path: Path) -> None:
    """r4-evidence-exact-p-one-sided, through read_sweep: 5 problems right only after the edit and none only
    before is p = 2/32 = 0.0625 two-sided, not below 0.05, even in a file whose every verdict says math-boost."""
    from mathneuro_edit.runs.sweep.evidence import read_sweep

    from .runs._sweep_json import valid_sweep

    data = valid_sweep()
    c = data["confirmation"]
    c.update(base_correct=1, edited_correct=6, base_only=0, edited_only=5, mcnemar_p=0.0625)
    for t in c["formats"][0]["tests"]:
        t.update(before_only=0, after_only=5, mcnemar_p=0.0625, passes=True)
    (tmp_path / "sweep.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"its confirmation says confirmed, but its counts \(0 right only before, 5"):
        read_sweep(tmp_path)


# ----------------------------------------------------------------------------------------------- runs/plan*


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


# ------------------------------------------------------------------------------------------ weights/edit_plan


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


# ----------------------------------------------------------------------------------------------- runs/plan

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


# ------------------------------------------------------------------------------------------------- publish


@pytest.mark.parametrize("name", ["\\etc\\passwd", "\\\\server\\share\\x.bin", "/etc/passwd", "checkpoint/../../x"])
def test_a_lock_output_path_that_is_absolute_on_any_system_is_malformed(name: str) -> None:
    """r4-lock-backslash-output-accepted: a lock's ``outputs`` are relative paths inside the run; one starting
    with ``\\`` is absolute on Windows (a UNC share with two) and is refused like ``/``."""
    from mathneuro_edit.publish.lock_policy import _canonical_sha, validate_lock

    public = {"base": {"model": "organism"}}
    good = {"recipe_sha256": _canonical_sha(public), "recipe": public, "outputs": {"checkpoint/x.bin": "a" * 64}}
    validate_lock(good)
    with pytest.raises(InputError, match="must be a relative file path inside the run"):
        validate_lock({**good, "outputs": {name: "a" * 64}})


def test_files_in_hidden_folders_are_never_published(tmp_path: Path) -> None:
    """r4-push-hidden-folder-published: a push leaves out hidden files *and* everything under a hidden folder
    (``.cache/``, ``.git/``: huggingface_hub's download metadata, a repo's objects), at any depth."""
    from mathneuro_edit.publish.hub_files import folder_files

    for rel in ("config.json", "sub/model.safetensors", ".hidden.txt", ".cache/huggingface/x.json", "sub/.git/HEAD"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    assert [rel for rel, _ in folder_files(tmp_path)] == ["config.json", "sub/model.safetensors"]


@pytest.mark.parametrize("base", ["C:\\Users\\alice\\llama", "D:/models/llama", "/home/alice/models/llama"])
def test_an_adapter_config_naming_a_windows_path_is_not_published(tmp_path: Path, base: str) -> None:
    """r4-push-adapter-private-base-accepted: PEFT loads an adapter's base from ``base_model_name_or_path``; a
    local path there (a Windows drive path too, which is not a local path on this machine) is refused before any
    request, never published."""
    from mathneuro_edit.publish.hub_files import folder_files, uploaded_contents

    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base, "peft_type": "SHIRA"}))
    with pytest.raises(InputError, match="base_model_name_or_path is a local path"):
        uploaded_contents(folder_files(tmp_path))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "meta-llama/Llama-3.2-1B"}))
    contents, blanked = uploaded_contents(folder_files(tmp_path))
    assert list(contents) == ["adapter_config.json"] and blanked == ()


def test_a_file_check_with_an_extra_file_is_not_ok() -> None:
    """r4-filecheck-ok-with-extra: ``verify`` and a folder's ``reproduce`` pass only when every file is the lock's
    (``FileCheck.ok``); a file the lock does not list is a difference (``--json``'s ``ok`` false)."""
    from mathneuro_edit.publish.integrity import FileCheck, compare_files

    states = compare_files({"checkpoint/a": "1", "checkpoint/b": "2"}, {"checkpoint/a": "1"})
    check = FileCheck("run", states)
    assert states == {"checkpoint/a": "match", "checkpoint/b": "extra"}
    assert not check.ok and check.to_dict()["ok"] is False and check.differences() == {"checkpoint/b": "extra"}
    assert FileCheck("run", {"checkpoint/a": "match"}).ok


def test_the_model_index_leaves_out_a_value_that_is_not_a_number() -> None:
    """r4-model-index-keeps-nan: a NaN metric (a loss a pruned model made non-finite) or an infinity is no result;
    the Hub's model-index gets the other values only, never ``.nan`` or ``.inf``."""
    from mathneuro_edit.publish.model_index import eval_results_metadata

    recipe = quickstart_recipe()
    assert recipe.evaluation is not None
    results = {"general": {"base": {"general_kl": 0.0}, "edited": {"general_loss": math.nan, "general_kl": 0.25}}}
    found = eval_results_metadata(results, recipe)
    assert [(r.metric_type, r.metric_value) for r in found] == [("kl_divergence", 0.25)]
    for infinite in (math.inf, -math.inf):  # only a hand-edited eval.json holds one: no result either
        results["general"]["edited"]["general_loss"] = infinite
        found = eval_results_metadata(results, recipe)
        assert [(r.metric_type, r.metric_value) for r in found] == [("kl_divergence", 0.25)]


# -------------------------------------------------------------------------------------------- weights/gguf_*


def test_a_tied_checkpoint_that_also_stores_its_head_gets_no_output_tensor(tmp_path: Path) -> None:
    """r4-gguf-tied-head-written: with ``tie_word_embeddings`` llama.cpp's converter writes no ``output.weight``
    (llama.cpp reuses ``token_embd``), also when the checkpoint holds the tied head as a second copy."""
    pytest.importorskip("gguf")
    from safetensors.torch import load_file, save_file

    from mathneuro_edit.weights.gguf_tensors import gguf_plan
    from tests.weights.test_gguf import save_base

    folder = save_base(tmp_path / "tied", "llama", tied=True)
    state = load_file(str(folder / "model.safetensors"))
    assert "lm_head.weight" not in state
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    names = [name for name, *_ in gguf_plan(folder, "F32")]
    assert "token_embd.weight" in names and "output.weight" not in names


def test_the_model_index_dataset_name_of_a_local_file_is_escaped(tmp_path: Path) -> None:
    """r4-model-index-file-name-raw: the model-index value itself (which the Hub shows and ``ModelCard.load``
    returns, not only the card's text) shows a data file name's bidi override and ESC escaped."""
    from mathneuro_edit.publish.model_index import eval_results_metadata
    from mathneuro_edit.util.console import document_safe

    name = "math\u202etxt.\x1b[31mjsonl"
    path = tmp_path / name
    path.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    recipe = quickstart_recipe([f"evaluation.math={path}"])
    found = eval_results_metadata({"math": {"edited": {"math_accuracy": 0.5}}}, recipe)
    assert len(found) == 1
    shown = found[0].dataset_name
    assert "\u202e" not in shown and "\x1b" not in shown
    assert shown == f"{document_safe(name)} (a local file; its sha256 is in the lock)"


def test_an_output_layer_of_another_vocabulary_than_the_config_s_is_refused(tmp_path: Path) -> None:
    """r4-gguf-output-rows-unchecked: llama.cpp builds ``output`` as vocab_size rows and refuses a file whose
    ``output.weight`` has others; the writer refuses it first, in one line, also when the embedding agrees."""
    pytest.importorskip("gguf")
    from safetensors.torch import load_file, save_file

    from mathneuro_edit.weights.gguf_writer import check_gguf
    from tests.weights.test_gguf import save_base

    folder = save_base(tmp_path / "untied", "llama", tied=False)
    check_gguf(folder, "F32")
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    state = load_file(str(folder / "model.safetensors"))
    state["lm_head.weight"] = state["lm_head.weight"][: vocab - 3].clone()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(
        InputError, match=rf"config.json: vocab_size is {vocab} but the output layer has {vocab - 3} rows"
    ):
        check_gguf(folder, "F32")


def test_the_card_s_dtype_sentence_is_only_for_a_cast_checkpoint() -> None:
    """r4-card-dtype-note-on-auto: ``outputs.dtype: auto`` (like no ``outputs.dtype``) keeps the base's own dtype,
    so the card says nothing of a cast; a named dtype is said, and an adapter (deltas) never says it."""
    from mathneuro_edit.outputs.adapter import ADAPTER
    from mathneuro_edit.outputs.checkpoint import CHECKPOINT
    from mathneuro_edit.publish.card_weights import dtype_note

    def lock(dtype):
        return {"recipe": {"outputs": {} if dtype is None else {"dtype": dtype}}, "base": {}}

    assert dtype_note(lock(None), CHECKPOINT, "bfloat16") == ""
    assert dtype_note(lock("auto"), CHECKPOINT, "bfloat16") == ""
    assert "stored in bfloat16 (`outputs.dtype`)" in dtype_note(lock("bfloat16"), CHECKPOINT, "bfloat16")
    assert dtype_note(lock("bfloat16"), ADAPTER, "bfloat16") == ""


def _two_tensor_gguf(path: Path) -> Path:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("a.weight", np.ones((4, 32), dtype=np.float32))
    w.add_tensor("b.weight", np.full((4, 32), 2.0, dtype=np.float32))  # 512 bytes: the file ends on its last byte
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_whose_last_tensor_is_cut_short_is_refused_by_its_header(tmp_path: Path) -> None:
    """r4-gguf-header-truncated-data: the header check refuses a tensor whose data ends past the file's end, not
    only one whose data starts past it (a download cut a few bytes short)."""
    from mathneuro_edit.weights.gguf_header import check_gguf_header

    path = _two_tensor_gguf(tmp_path / "whole.gguf")
    check_gguf_header(path)
    raw = path.read_bytes()
    for cut in (1, 4, 511):
        short = tmp_path / f"short-{cut}.gguf"
        short.write_bytes(raw[:-cut])
        with pytest.raises(InputError, match=r"the data of 'b.weight' lies beyond the end of the file"):
            check_gguf_header(short)


def test_a_gguf_that_lists_one_tensor_twice_is_refused_by_its_header(tmp_path: Path) -> None:
    """r4-gguf-header-duplicate-tensor: gguf's reader keeps one of two tensors of the same name (which one
    depends on the reader); the header check refuses the file in one line instead."""
    from mathneuro_edit.weights.gguf_header import check_gguf_header

    path = _two_tensor_gguf(tmp_path / "two.gguf")
    raw = path.read_bytes()
    assert raw.count(b"b.weight") == 1
    (tmp_path / "twice.gguf").write_bytes(raw.replace(b"b.weight", b"a.weight"))
    with pytest.raises(InputError, match=r"it lists the tensor 'a.weight' twice"):
        check_gguf_header(tmp_path / "twice.gguf")


def test_a_gguf_s_identity_never_takes_a_value_holding_a_path(tmp_path: Path) -> None:
    """r4-gguf-identity-keeps-paths: what a GGUF base says it is (``general.*``) reaches the lock and the card only
    as plain short values; one with a ``/`` (a path of the machine that converted it) is dropped."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    from mathneuro_edit.weights.gguf_reader import gguf_identity

    path = tmp_path / "named.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("/home/alice/models/smollm2")
    w.add_organization("HuggingFaceTB")
    w.add_basename("smollm2")
    w.add_finetune("../../etc")
    w.add_languages(["en", "fr/../x", "de"])
    w.add_tensor("a.weight", np.ones((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert gguf_identity(path) == {"organization": "HuggingFaceTB", "basename": "smollm2", "languages": ["en", "de"]}
