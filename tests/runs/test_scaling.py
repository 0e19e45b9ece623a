"""Scale-out: accelerate placement and offload, weights from checkpoints, data-parallel calibration, the planner.

References are independent of the code under test: the all-in-memory model (plain ``from_pretrained``) for
offload, ``named_parameters()`` of a loaded model for checkpoint reading, a single-process ``calibrate`` for the
data-parallel path, and an instantiated model / the real saved files for the planner.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from mathneuro_edit import (
    ActivationStats,
    InputError,
    calibrate,
    find_math_params,
    find_targets,
)
from mathneuro_edit.engine.distributed import calibrate_distributed, shard_texts
from mathneuro_edit.runs.plan import PlanSettings, plan_from_config
from mathneuro_edit.weights.loading import (
    load_model,
    model_weights,
    weights_from_checkpoint,
)
from tests._models import save_tiny
from tests._tiny import GENERAL, MATH, build, char_tokenizer

REPO = Path(__file__).resolve().parents[2]
CAL = dict(max_length=64, batch_size=4, progress=False)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {fam: save_tiny(root / fam, fam, sharded=True) for fam in ("llama", "mixtral")}


def _stats_pair(model):
    tok = char_tokenizer()
    return calibrate(model, tok, MATH, **CAL), calibrate(model, tok, GENERAL, **CAL)


def _assert_same_stats(a: ActivationStats, b: ActivationStats, *, exact_meta: bool = True) -> None:
    assert list(a.targets) == list(b.targets)
    for n in a.targets:
        torch.testing.assert_close(a.norm_sum[n], b.norm_sum[n], rtol=1e-5, atol=1e-5)  # NaN fails too
        torch.testing.assert_close(a.sq_sum[n], b.sq_sum[n], rtol=1e-5, atol=1e-5)
        assert torch.equal(a.token_count[n], b.token_count[n])
    if exact_meta:
        assert a.meta == b.meta


# ----------------------------------------------------------------------------------------------- offload
def _offloaded(folder: Path, tmp_path: Path, **placement):
    model = AutoModelForCausalLM.from_pretrained(folder, offload_folder=str(tmp_path / "off"), **placement).eval()
    assert any(p.device.type == "meta" for p in model.parameters()), "the test must really offload something"
    return model


def test_calibrate_with_disk_offload_equals_in_memory(folders, tmp_path):
    ref = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    # 60 KB of "CPU" keeps the embedding resident and sends every decoder layer and the head to disk
    off = _offloaded(folders["llama"], tmp_path, device_map="auto", max_memory={"cpu": "60KB"})
    assert "disk" in set(off.hf_device_map.values())
    m_ref, g_ref = _stats_pair(ref)
    m_off, g_off = _stats_pair(off)
    _assert_same_stats(m_off, m_ref)
    _assert_same_stats(g_off, g_ref)
    assert all(s.device.type == "cpu" for s in m_off.norm_sum.values())  # accumulated on a real device
    # masks: offloaded weights read back through accelerate (model_weights) give the same bits
    mask_ref = find_math_params(ref, m_ref, g_ref, top_k=0.1)
    mask_off = find_math_params(model_weights(off), m_off, g_off, top_k=0.1)
    assert mask_off.sha256 == mask_ref.sha256


def test_loading_with_max_memory_leaves_the_recipes_caps_as_written(folders, tmp_path):
    """accelerate rewrites max_memory in place ("60KB" -> 60000); the recipe's dict must stay as the user wrote it
    (it is written to the lock after loading)."""
    caps = {"cpu": "60KB"}
    model, _ = load_model(str(folders["llama"]), device_map="auto", max_memory=caps, offload_folder=tmp_path / "off")
    assert any(p.device.type == "meta" for p in model.parameters()) and caps == {"cpu": "60KB"}


def test_model_weights_reads_offloaded_parameters(folders, tmp_path):
    ref = dict(AutoModelForCausalLM.from_pretrained(folders["mixtral"]).named_parameters())
    off = _offloaded(folders["mixtral"], tmp_path, device_map={"": "disk"})  # fused experts re-saved by transformers
    weights = model_weights(off)
    assert set(weights) == set(ref)
    for name, p in ref.items():
        assert weights.shape_of(name) == tuple(p.shape)
        assert torch.equal(weights[name], p), name


def test_calibrate_everything_on_disk(folders, tmp_path):
    ref = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    off = _offloaded(folders["llama"], tmp_path, device_map={"": "disk"})  # even the embedding: input device
    _assert_same_stats(calibrate(off, char_tokenizer(), MATH, **CAL), calibrate(ref, char_tokenizer(), MATH, **CAL))


def test_calibrate_offloaded_moe_experts(folders, tmp_path):
    ref = AutoModelForCausalLM.from_pretrained(folders["mixtral"]).eval()
    keep = {
        "model.embed_tokens": "cpu",
        "model.layers.0": "disk",
        "model.layers.1": "cpu",
        "model.norm": "cpu",
        "model.rotary_emb": "cpu",
        "lm_head": "cpu",
    }
    off = _offloaded(folders["mixtral"], tmp_path, device_map=keep)  # experts' weights are meta in our pre-hook
    _assert_same_stats(calibrate(off, char_tokenizer(), MATH, **CAL), calibrate(ref, char_tokenizer(), MATH, **CAL))


def test_early_stop_leaves_offloaded_weights_offloaded_and_no_hooks(folders, tmp_path):
    ref = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    off = _offloaded(folders["llama"], tmp_path, device_map="auto", max_memory={"cpu": "60KB"})
    offloaded = {n for n, p in off.named_parameters() if p.device.type == "meta"}
    tok = char_tokenizer()
    # lm_head unscored: from the second batch on, the forward stops inside the last (disk-offloaded) layer, whose
    # accelerate pre_forward has loaded its weights; they must go back to meta as after a complete forward
    kw = dict(CAL, batch_size=2, exclude=["lm_head"])
    _assert_same_stats(calibrate(off, tok, MATH, **kw), calibrate(ref, tok, MATH, **kw))
    assert {n for n, p in off.named_parameters() if p.device.type == "meta"} == offloaded
    hooks = [m._hf_hook for m in off.modules() if getattr(m, "_hf_hook", None) is not None]
    assert all(not getattr(h, "tied_pointers_to_remove", None) for h in hooks)
    assert all(not (m._forward_pre_hooks or m._forward_hooks) for m in off.modules())
    ids = torch.tensor([tok(MATH[0])["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(off(input_ids=ids).logits, ref(input_ids=ids).logits)
    # accelerate 1.15 hooks offloaded weights leaf by leaf (never in flight at the stop); a hook on a whole block
    # (place_submodules) is in flight when the forward stops inside it: its post_forward must still offload
    from accelerate.hooks import AlignDevicesHook, add_hook_to_module

    block = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    layer = block.model.layers[1]
    weights = {n: p.detach().clone() for n, p in layer.named_parameters()}
    add_hook_to_module(
        layer, AlignDevicesHook(execution_device="cpu", offload=True, weights_map=weights, place_submodules=True)
    )
    assert all(p.device.type == "meta" for p in layer.parameters())
    _assert_same_stats(calibrate(block, tok, MATH, **kw), calibrate(ref, tok, MATH, **kw))
    assert all(p.device.type == "meta" for p in layer.parameters()), "weights left loaded after the stop"


# ----------------------------------------------------------------------------------- checkpoint weights
@pytest.mark.parametrize("family", ["llama", "mixtral"])
def test_weights_from_checkpoint_equal_loaded_parameters(folders, family):
    params = dict(AutoModelForCausalLM.from_pretrained(folders[family]).named_parameters())
    weights = weights_from_checkpoint(folders[family])
    assert list(weights) == list(find_targets(AutoModelForCausalLM.from_pretrained(folders[family])))
    for name in weights:  # mixtral: fused experts assembled from per-expert w1/w2/w3 tensors
        assert torch.equal(weights[name], params[name]), name


def test_mask_from_checkpoint_weights_is_identical(folders):
    model = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    math, general = _stats_pair(model)
    expected = find_math_params(model, math, general, top_k=0.1)
    weights = weights_from_checkpoint(folders["llama"], names=math.targets, dtype=math.meta["dtype"])
    assert find_math_params(weights, math, general, top_k=0.1).sha256 == expected.sha256
    # cast to the calibration dtype: a bf16 run reads the float32 checkpoint as bf16
    assert weights_from_checkpoint(folders["llama"], dtype="bfloat16")[next(iter(math.targets))].dtype == torch.bfloat16


def test_mask_step_holds_one_checkpoint_weight_at_a_time(folders):
    model = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    math, general = _stats_pair(model)
    weights = weights_from_checkpoint(folders["llama"], names=math.targets)
    alive, peak = [0], [0]

    def release() -> None:
        alive[0] -= 1

    class Tracked(Mapping):  # counts the tensors it handed out that are still referenced
        def __getitem__(self, name):
            t = weights[name]
            alive[0] += 1
            peak[0] = max(peak[0], alive[0])
            weakref.finalize(t, release)
            return t

        def __iter__(self):
            return iter(weights)

        def __len__(self):
            return len(weights)

        def shape_of(self, name):
            return weights.shape_of(name)

    mask = find_math_params(Tracked(), math, general, top_k=0.1)
    assert mask.sha256 == find_math_params(model, math, general, top_k=0.1).sha256
    assert peak[0] <= 2, f"{peak[0]} weights held at once (of {len(weights)}): a 70B model would not fit in RAM"


def test_loading_errors_are_one_clear_line(tmp_path, folders):
    with pytest.raises(InputError, match="no such local folder"):
        load_model(str(tmp_path / "missing"), dtype="float32", device="cpu")
    with pytest.raises(InputError, match="device or device_map"):
        load_model(str(folders["llama"]), dtype="float32", device="cpu", device_map="auto")
    with pytest.raises(InputError, match="not a parameter"):
        weights_from_checkpoint(folders["llama"], names=["model.nope.weight"])
    no_tok = save_tiny(tmp_path / "no_tok", "llama", tokenizer=False)
    with pytest.raises(InputError, match="cannot load its tokenizer"):
        load_model(str(no_tok), dtype="float32", device="cpu")
    model, tok = load_model(str(folders["llama"]), dtype="bfloat16", device="cpu")
    assert next(model.parameters()).dtype == torch.bfloat16 and not model.training and tok("ab")["input_ids"]


# ------------------------------------------------------------------------------------------ data parallel
_WORKER = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from tests._tiny import MATH, GENERAL
    from mathneuro_edit.weights.loading import load_model
    from mathneuro_edit.engine.distributed import calibrate_distributed
    import mathneuro_edit.engine.distributed as cal  # the name calibrate_distributed calls

    folder, out = sys.argv[1:3]
    rank = int(os.environ["RANK"])
    model, tok = load_model(folder, dtype="float32", device="cpu")
    # start together (a file barrier), so that the short timeout only has to cover calibration, not imports
    open(f"{{out}}/ready.{{rank}}", "w").close()
    while not all(os.path.exists(f"{{out}}/ready.{{r}}") for r in range(2)):
        time.sleep(0.05)
    kw = dict(max_length=64, batch_size=4, progress=False, timeout_s=5)
    # 1. the real thing: both sets, rank 0 writes the files
    for name, texts in (("math", MATH), ("general", GENERAL)):
        s = calibrate_distributed(model, tok, texts, out=f"{{out}}/{{name}}.stats.safetensors", **kw)
        assert (s is None) == (rank != 0)
    real = cal.calibrate
    # 2. rank 1 raises inside calibrate: every rank must raise (caught here to go on to 3.)
    if rank == 1:
        def boom(*a, **k):
            raise RuntimeError("injected failure on rank 1")
        cal.calibrate = boom
    try:
        calibrate_distributed(model, tok, MATH, **kw)
        print(f"rank {{rank}} did not raise", flush=True)
    except Exception as e:
        print(f"rank {{rank}} raised {{type(e).__name__}}: {{e}}", flush=True)
    cal.calibrate = real
    # 3. rank 1 hangs: rank 0 times out after 5 s and exits non-zero; torchrun then stops rank 1
    if rank == 1:
        cal.calibrate = lambda *a, **k: time.sleep(300)
    calibrate_distributed(model, tok, MATH, **kw)
    print(f"rank {{rank}} done", flush=True)
    """
)


def test_data_parallel_equals_single_process_and_failing_ranks_stop_all(tmp_path, folders):
    script = tmp_path / "worker.py"
    script.write_text(_WORKER.format(repo=str(REPO)))
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        str(script),
        str(folders["llama"]),
        str(tmp_path),
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    elapsed = time.monotonic() - start

    # 1. equal to one process: sums (float32 order aside), counts, provenance, and the mask bit for bit
    model = AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    math, general = _stats_pair(model)
    dp_math = ActivationStats.load(tmp_path / "math.stats.safetensors")
    dp_general = ActivationStats.load(tmp_path / "general.stats.safetensors")
    _assert_same_stats(dp_math, math)  # meta included: full-list texts_sha256, samples, tokens, truncated
    _assert_same_stats(dp_general, general)
    assert (
        find_math_params(model, dp_math, dp_general, top_k=0.1).sha256
        == find_math_params(model, math, general, top_k=0.1).sha256
    )
    # 2. one rank raises: it raises its own error, the other one naming it
    assert "rank 1 raised RuntimeError: injected failure on rank 1" in proc.stdout
    assert (
        "rank 0 raised MathNeuroEditError: calibrate_distributed: rank(s) 1 of 2 failed during calibration"
        in proc.stdout
    )
    # 3. a hanging rank: the 5 s timeout (not the 300 s sleep) ends the run, with a clear error and exit status
    assert proc.returncode != 0 and "done" not in proc.stdout
    assert "rank 0: sharing the status of calibration failed while waiting for the other ranks" in proc.stderr
    assert elapsed < 90


def test_shards_are_contiguous_and_cover_everything():
    texts = [str(i) for i in range(11)]
    parts = [shard_texts(texts, r, 3) for r in range(3)]
    assert sum(parts, []) == texts and [len(p) for p in parts] == [3, 4, 4]
    model, tok = build("llama")
    assert calibrate_distributed(model, tok, MATH[:3], **CAL).meta["num_samples"] == 3  # plain process: calibrate


# ------------------------------------------------------------------------------------------------ planner
def _file_tensor_bytes(path: Path) -> int:
    return sum(t.numel() * t.element_size() for t in load_file(str(path)).values())


@pytest.mark.parametrize("family", ["llama", "gpt2", "mixtral"])
def test_plan_counts_match_an_instantiated_model(tmp_path, family):
    model, tok = build(family)
    plan = plan_from_config(
        model.config.to_dict(), PlanSettings(dtype="float32", top_k=0.1, batch_size=4, max_length=64)
    )
    targets = find_targets(model)
    assert plan.n_params == sum(p.numel() for p in model.parameters())
    assert plan.n_targets == len(targets)
    assert plan.n_target_params == sum(p.numel() for n, p in model.named_parameters() if n in targets)
    assert plan.weights_bytes == plan.n_params * 4
    math = calibrate(model, tok, MATH, **CAL)
    assert plan.stats_bytes == _file_tensor_bytes(math.save(tmp_path / "m.stats.safetensors"))
    wanda = find_math_params(model, math, None, top_k=0.1, method="wanda")  # exactly top_k per matrix
    assert plan.mask_bytes == _file_tensor_bytes(wanda.save(tmp_path / "m.mask.safetensors"))
    assert "parameters" in plan.to_text() and plan.calibration_peak_bytes > plan.weights_bytes


def test_plan_with_a_mask_gives_its_exact_mask_and_adapter_sizes(folders, tmp_path):
    """With the saved mask, plan's mask size is the mask's own tensor bytes and its adapter size the written
    adapter's tensor bytes (its r too); without it, both are top_k bounds at least as large."""
    import json

    from mathneuro_edit.weights.adapter import export_adapter
    from tests._models import tiny_mask

    base = folders["llama"]
    model = AutoModelForCausalLM.from_pretrained(base)
    mask = tiny_mask(model)
    mask_path = mask.save(tmp_path / "mask.safetensors")
    adapter = export_adapter(base, mask_path, 1.1, tmp_path / "adapter")
    counted = plan_from_config(str(base), PlanSettings(dtype="float32", top_k=0.1), mask_file=mask_path)
    assert counted.mask_counted and counted.mask_bytes == _file_tensor_bytes(mask_path)
    assert counted.adapter_r == json.loads((adapter.path / "adapter_config.json").read_text())["r"]
    assert counted.adapter_bytes == _file_tensor_bytes(adapter.path / "adapter_model.safetensors")
    # the file given: its exact size in bytes, beside its tensors' (the header makes the difference)
    size = Path(mask_path).stat().st_size
    assert counted.mask_file_bytes == size > counted.mask_bytes
    assert f"mask {size:,} bytes (the file given; its counts: {counted.mask_bytes:,} bytes" in counted.to_text()
    assert "adapter" in counted.to_text()
    in_memory = plan_from_config(str(base), PlanSettings(dtype="float32", top_k=0.1), mask_file=mask)
    assert in_memory.mask_file_bytes is None and "(its counts)" in in_memory.to_text()
    bound = plan_from_config(str(base), PlanSettings(dtype="float32", top_k=1.0))
    assert not bound.mask_counted and bound.adapter_bytes >= counted.adapter_bytes
    with pytest.raises(InputError, match="is not a scored weight of this config"):
        plan_from_config(str(folders["mixtral"]), mask_file=mask_path)  # a llama mask on a mixtral


def test_plan_recipe_reads_the_base_folder_config(folders):
    from mathneuro_edit.recipe.io import recipe_from_dict
    from mathneuro_edit.runs.plan import plan_recipe

    recipe = recipe_from_dict(
        {
            "base": {"model": str(folders["mixtral"]), "dtype": "float32"},
            "data": {"math": "organism:math", "general": ["organism:general"] * 2},
            "calibration": {"batch_size": 2, "max_length": 16},
            "edit": {"scale": 1.1},
        }
    )
    plan = plan_recipe(recipe)
    model = AutoModelForCausalLM.from_pretrained(folders["mixtral"])
    assert plan.n_params == sum(p.numel() for p in model.parameters())
    assert plan.targets_by_kind == {"linear": 11, "experts": 4}  # 2 x (q k v o router) + lm_head; 2 x 2 fused
    assert plan.settings["general_sets"] == 2 and plan.settings["batch_size"] == 2


def test_plan_llama3_8b_like_config():
    cfg = dict(
        model_type="llama",
        vocab_size=128256,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    )
    plan = plan_from_config(cfg, PlanSettings(dtype="bfloat16", batch_size=8, max_length=512))
    assert abs(plan.n_params - 8.03e9) / 8.03e9 < 0.01
    assert plan.targets_by_kind == {"linear": 32 * 7 + 1}  # q k v o gate up down per layer + untied lm_head
    assert 16e9 < plan.calibration_peak_bytes < 20e9  # 16.1 GB of bf16 weights + activations
    assert plan.largest_target == ("lm_head.weight", 128256 * 4096)
    two_gpus = plan_from_config(cfg, PlanSettings(dtype="bfloat16"), max_memory={0: "10GB", 1: "10GB", "cpu": "30GB"})
    assert set(two_gpus.placement) >= {"cuda:0", "cuda:1"}  # split by layer: 16 GB does not fit one 10 GB cap
    assert abs(sum(two_gpus.placement.values()) - plan.weights_bytes) < 1e6  # + buffers (rotary inv_freq)
