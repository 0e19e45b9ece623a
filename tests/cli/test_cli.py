"""The CLI end to end on a tiny local model: run, stage commands, bad input, lock + reproduce, card."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from tests._tiny import build, write_workspace

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    write_workspace(root)
    return root


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def run_out(workspace: Path) -> Path:
    """``run`` of the workspace recipe, once per module: tests that compare with it work alone and in any order."""
    out = workspace / "out"
    code, text = _run("run", str(workspace / "recipe.yaml"), "--out", str(out), "--quiet")
    assert code == 0, text
    return out


def test_help_is_fast_and_lists_commands():
    code = "import time, sys; t=time.time(); from mathneuro_edit.cli.main import main; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # --help never imports torch
    code, text = _run("--help")
    assert code == 0
    for cmd in ("run", "calibrate", "mask", "export", "eval", "card", "push", "verify", "inspect", "reproduce"):
        assert cmd in text


def test_run_end_to_end_then_reproduce_bit_for_bit(workspace, run_out):
    out = run_out
    for rel in (
        "checkpoint/config.json",
        "checkpoint/README.md",
        "checkpoint/mathneuro_recipe.lock.yaml",
        "adapter/adapter_config.json",
        "mask.safetensors",
        "stats/math.stats.safetensors",
        "stats/general-0.stats.safetensors",
        "eval.json",
        "mathneuro_recipe.lock.yaml",
    ):
        assert (out / rel).is_file(), rel
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    assert lock["recipe"]["edit"]["scale"] == 1.1 and lock["recipe"]["calibration"]["batch_size"] == 4
    assert str(workspace) not in (out / "checkpoint" / "README.md").read_text()  # no local path in the card
    ev = json.loads((out / "eval.json").read_text())
    assert {"base", "edited"} <= set(ev["math"]) and "general_kl" in ev["general"]["edited"]
    # the export loads with plain transformers and is the base with W <- float32(W) * 1.1 on the mask, nothing else
    from transformers import AutoModelForCausalLM

    from mathneuro_edit import Mask

    mask = Mask.load(out / "mask.safetensors")
    base = AutoModelForCausalLM.from_pretrained(workspace / "base").state_dict()
    baked = AutoModelForCausalLM.from_pretrained(out / "checkpoint").state_dict()
    assert set(baked) == set(base) and mask.total()[0] > 0
    for name, w in base.items():
        expect = torch.where(mask[name], (w.float() * 1.1).to(w.dtype), w) if name in mask else w
        assert torch.equal(baked[name], expect), name
    # card metadata parses back
    from huggingface_hub import ModelCard

    data = ModelCard.load(out / "checkpoint" / "README.md").data.to_dict()
    assert "mathneuro" in data["tags"] and data.get("base_model") is None  # a local base is never named
    # inspect shows a table; verify passes
    code, text = _run("inspect", str(out / "mask.safetensors"))
    assert code == 0 and "TOTAL" in text
    code, text = _run("verify", str(out), "--base", str(workspace / "base"))
    assert code == 0, text
    # reproduce: same machine, same versions -> identical bytes
    code, text = _run(
        "reproduce",
        str(out),
        "--base",
        str(workspace / "base"),
        "--out",
        str(workspace / "again"),
        "--quiet",
        "--set",
        f"data.math.path={workspace / 'math.jsonl'}",
        "--set",
        f"data.general.0.path={workspace / 'general.txt'}",
        "--set",
        f"evaluation.math.path={workspace / 'eval.jsonl'}",
        "--set",
        f"evaluation.general.0.path={workspace / 'general.txt'}",
    )
    assert code == 0, text
    assert "bit for bit" in text and "differs" not in text


def test_stage_commands_match_run(workspace, run_out, tmp_path):
    recipe = str(workspace / "recipe.yaml")
    assert _run("calibrate", recipe, "--out", str(tmp_path / "stats"), "-q")[0] == 0
    code, text = _run(
        "mask", recipe, "--stats", str(tmp_path / "stats"), "--out", str(tmp_path / "m.safetensors"), "-q"
    )
    assert code == 0, text
    from mathneuro_edit import Mask

    assert Mask.load(tmp_path / "m.safetensors").sha256 == Mask.load(run_out / "mask.safetensors").sha256
    code, text = _run(
        "export",
        recipe,
        "--mask",
        str(tmp_path / "m.safetensors"),
        "--out",
        str(tmp_path / "ck"),
        "-q",
        "--workers",
        "2",
    )
    assert code == 0, text
    assert (tmp_path / "ck" / "config.json").is_file()
    # the recipe's outputs decide what `export` writes: a recipe without a checkpoint gets its adapter
    code, text = _run(
        "export", recipe, "--mask", str(tmp_path / "m.safetensors"), "--out", str(tmp_path / "ad"), "-q",
        "--set", "outputs.checkpoint=false", "--set", "outputs.adapter=true",
    )  # fmt: skip
    assert code == 0, text
    assert (tmp_path / "ad" / "adapter_config.json").is_file() and not (tmp_path / "ad" / "config.json").exists()
    # the export folder verifies against its own lock even beside a file named mask.safetensors (the name a user
    # gives `mask --out`), which once sent verify to look for the lock in the folder above
    shutil.copy(tmp_path / "m.safetensors", tmp_path / "mask.safetensors")
    code, text = _run(
        "verify", str(tmp_path / "ck"), "--mask", str(tmp_path / "mask.safetensors"), "--base", str(workspace / "base")
    )
    assert code == 0, text
    code, text = _run(
        "mask",
        recipe,
        "--stats",
        str(tmp_path / "stats"),
        "--out",
        str(tmp_path / "m2.safetensors"),
        "--set",
        "mask.top_k=0.01",
        "-q",
    )
    assert (
        code == 0
        and Mask.load(tmp_path / "m2.safetensors").total()[0] < Mask.load(tmp_path / "m.safetensors").total()[0]
    )


BAD = [
    ("missing model path", {"base.model": "/nonexistent/model"}, r"/nonexistent/model"),
    ("unknown recipe key", {"mask.topk": "0.1"}, r"mask\.topk"),
    ("top_k 0", {"mask.top_k": "0"}, r"mask\.top_k"),
    ("top_k 1.5", {"mask.top_k": "1.5"}, r"mask\.top_k"),
    ("scale nan", {"edit.scale": ".nan"}, r"edit\.scale"),
    ("scale negative", {"edit.scale": "-1"}, r"edit\.scale"),
]


@pytest.mark.parametrize("label,sets,pattern", BAD, ids=[b[0] for b in BAD])
def test_bad_input_exits_2_with_one_line_and_no_output(workspace, tmp_path, label, sets, pattern):
    import re

    args = ["run", str(workspace / "recipe.yaml"), "--out", str(tmp_path / "o"), "-q"]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    code, text = _run(*args)
    assert code == 2, (label, text)
    assert "Traceback" not in text and re.search(pattern, text), (label, text)
    assert not (tmp_path / "o").exists() and not any(p.name.startswith(".o.tmp") for p in tmp_path.iterdir())


def test_bad_files_exit_2(workspace, tmp_path):
    recipe = str(workspace / "recipe.yaml")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, text = _run("run", recipe, "--out", str(tmp_path / "o"), "-q", "--set", f"data.math.path={empty}")
    assert code == 2 and "empty" in text.lower() and "Traceback" not in text, text
    nofield = tmp_path / "nofield.jsonl"
    nofield.write_text(json.dumps({"other": "x"}) + "\n")
    code, text = _run(
        "run",
        recipe,
        "--out",
        str(tmp_path / "o"),
        "-q",
        "--set",
        f"data.math.path={nofield}",
        "--set",
        "data.math.field=text",
    )
    assert code == 2 and "text" in text and "Traceback" not in text, text
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for f in (workspace / "base").iterdir():
        (corrupt / f.name).write_bytes(f.read_bytes())
    shard = sorted(corrupt.glob("*.safetensors"))[0]
    shard.write_bytes(b"\x00garbage" * 10)
    code, text = _run("run", recipe, "--out", str(tmp_path / "o"), "-q", "--set", f"base.model={corrupt}")
    assert code == 2 and "Traceback" not in text, text
    existing = tmp_path / "exists"
    existing.mkdir()
    (existing / "keep.txt").write_text("mine")
    code, text = _run("run", recipe, "--out", str(existing), "-q")
    assert code == 2 and "exists" in text
    assert (existing / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "o").exists()


def test_internal_error_exit_3_and_debug_traceback(workspace, tmp_path, monkeypatch):
    import mathneuro_edit.runs.pipeline as pipeline

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(pipeline, "calibrate_step", boom)
    code, text = _run("run", str(workspace / "recipe.yaml"), "--out", str(tmp_path / "o"), "-q")
    assert code == 3 and "internal error" in text and "kaboom" in text and "Traceback" not in text
    assert not (tmp_path / "o").exists()
    monkeypatch.setenv("MATHNEURO_EDIT_DEBUG", "1")
    result = CliRunner().invoke(main, ["run", str(workspace / "recipe.yaml"), "--out", str(tmp_path / "o"), "-q"])
    assert result.exit_code == 3  # the traceback, and the same status
    assert "Traceback (most recent call last)" in result.output and "RuntimeError: kaboom" in result.output


def test_subprocess_exit_codes(workspace, tmp_path):
    env = {**os.environ, "MATHNEURO_EDIT_DEBUG": ""}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mathneuro_edit.cli",
            "run",
            str(workspace / "recipe.yaml"),
            "--out",
            str(tmp_path / "o"),
            "--set",
            "mask.top_k=2",
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 2 and "mask.top_k" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


SMALL_SWEEP = ["--set", "sweep.selection_samples=3", "--set", "sweep.confirmation_samples=3"]  # eval.jsonl: 6


def test_sweep_consistency_and_plots(workspace, run_out, tmp_path):
    from mathneuro_edit.evaluation.significance import holm_adjust
    from mathneuro_edit.runs.sweep.procedure import SweepPoint, select_candidate
    from tests.runs.test_sweep import reference_candidate, reference_front

    recipe = str(workspace / "recipe.yaml")
    code, text = _run(
        "sweep",
        recipe,
        "--out",
        str(tmp_path / "sw"),
        "--top-k",
        "0.05,0.2",
        "--scale",
        "0,1.1",
        "--kl-budget",
        "10",
        *SMALL_SWEEP,
        "--set",
        "sweep.general_samples=3",
        "-q",
    )
    assert code == 0, text
    rows = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    sel = rows["selection"]
    assert len(sel["points"]) == 4 and sel["n"] == 3 and rows["kl_budget"] == 10  # --kl-budget = sweep.kl_budget
    assert sel["general_texts"] == 3  # sweep.general_samples, not evaluation.samples (4)
    points = [SweepPoint(**p) for p in sel["points"]]  # front, Holm and candidate: the independent references
    assert rows["pareto_front"] == reference_front(points)
    assert [p.holm_p for p in points] == holm_adjust([p.mcnemar_p for p in points])
    base_correct = sel["base"]["math_correct"]
    assert (
        rows["candidate"] == reference_candidate(points, base_correct, 10) == select_candidate(points, base_correct, 10)
    )
    conf = rows["confirmation"]
    if conf is None:
        assert rows["candidate"] is None and rows["best"] is None
    else:
        assert conf["n"] == 3 and not set(conf["problems_sha256"]) & set(sel["problems_sha256"])
    assert (rows["best"] is not None) == bool(conf and conf["confirmed"])
    assert rows["recommendation"].startswith("recommended: " if rows["best"] is not None else "nothing confirmed:")
    assert {(p["top_k"], p["scale"]) for p in sel["points"]} == {(0.05, 0.0), (0.05, 1.1), (0.2, 0.0), (0.2, 1.1)}
    assert all(p["general_kl"] >= 0 for p in sel["points"])
    assert (tmp_path / "sw" / "sweep.csv").read_text().startswith("variant,round,top_k,scale")
    # the general loss carries its standard error, and each edit its paired change with its standard error
    # (regression: the sweep reported the losses bare)
    base = sel["base"]
    assert base["general_loss_se"] > 0
    for p in sel["points"]:
        assert p["general_loss_se"] > 0 and p["loss_change_se"] > 0
        assert p["loss_change"] == pytest.approx(p["general_loss"] - base["general_loss"], abs=1e-9)
    assert "general_loss_se,loss_change,loss_change_se" in (tmp_path / "sw" / "sweep.csv").read_text().splitlines()[0]
    assert (tmp_path / "sw" / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    # more pruning never selects fewer weights
    sel_w = {(p["top_k"], p["scale"]): p["selected"] for p in sel["points"]}
    assert sel_w[(0.2, 0.0)] >= sel_w[(0.05, 0.0)]
    code, text = _run("sweep", recipe, "--out", str(tmp_path / "big"), "-q")  # 300 + 600 problems of a 6-line file
    assert code == 2 and "eval.jsonl has 6 problems; the sweep needs" in text and len(text.strip().splitlines()) == 1
    code, text = _run("consistency", recipe, "--out", str(tmp_path / "co"), "--sizes", "1,8", "--repeats", "2", "-q")
    assert code == 0, text
    info = json.loads((tmp_path / "co" / "consistency.json").read_text())
    assert (info["top_k"], info["sizes"], info["repeats"], info["math_samples"]) == (0.1, [1, 8], 2, 8)
    cons = info["rows"]
    assert [r["samples"] for r in cons] == [1, 8]
    assert cons[1]["overlap_with_full_mean"] >= 0.99  # all 8 samples drawn (reordered): the full data itself
    # the overlaps themselves are checked against an independent Jaccard in test_consistency.py
    assert cons[0]["repeats"] == 2 and cons[0]["overlap_between_draws_mean"] is not None
    assert cons[0]["overlap_with_full_min"] <= cons[0]["overlap_with_full_mean"]
    code, text = _run("sweep", recipe, "--out", str(tmp_path / "bad"), "--top-k", "0.05,abc")
    assert code == 2 and "--top-k" in text
    code, text = _run("inspect", str(run_out / "mask.safetensors"), "--plot", str(tmp_path / "layers.png"))
    assert code == 0 and (tmp_path / "layers.png").read_bytes()[:4] == b"\x89PNG"


def test_data_parallel_calibrate_under_torchrun_matches_single_process(workspace, tmp_path):
    from mathneuro_edit import ActivationStats

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--master-port",
        "29533",
        "-m",
        "mathneuro_edit.cli",
        "calibrate",
        str(workspace / "recipe.yaml"),
        "--out",
        str(tmp_path / "dp"),
        "-q",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _run("calibrate", str(workspace / "recipe.yaml"), "--out", str(tmp_path / "one"), "-q")[0] == 0
    for f in ("math.stats.safetensors", "general-0.stats.safetensors"):
        dp, one = ActivationStats.load(tmp_path / "dp" / f), ActivationStats.load(tmp_path / "one" / f)
        assert dp.meta["num_samples"] == one.meta["num_samples"] and dp.meta["texts_sha256"] == one.meta["texts_sha256"]
        for name in one.norm_sum:
            torch.testing.assert_close(dp.norm_sum[name], one.norm_sum[name], rtol=1e-5, atol=1e-6)


def test_eval_command_and_missing_lm_eval(workspace, tmp_path, monkeypatch):
    recipe = str(workspace / "recipe.yaml")
    code, text = _run("eval", recipe, "--out", str(tmp_path / "eval.json"), "-q")
    assert code == 0 and "math" in text, text
    assert set(json.loads((tmp_path / "eval.json").read_text())) == {"math", "general"}
    # a bad lm-eval setting: one clear line naming the key, exit 2, before anything runs
    code, text = _run(
        "eval",
        recipe,
        "-q",
        "--set",
        "evaluation.lm_eval.tasks=[arithmetic_local]",
        "--set",
        f"evaluation.lm_eval.include_path={tmp_path / 'no-such-folder'}",
    )
    assert code == 2 and "evaluation.lm_eval.include_path" in text and "Traceback" not in text, text
    # lm-eval missing: one line naming the extra (the import fails even where lm-eval is installed)
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    code, text = _run("eval", recipe, "-q", "--set", "evaluation.lm_eval.tasks=[gsm8k_cot]")
    assert code == 2 and "pip install 'lm-eval>=0.4.13,<0.5'" in text and "Traceback" not in text, text


def test_reproduce_reports_a_different_result(workspace, tmp_path):
    out = workspace / "out"
    if not out.exists():
        assert _run("run", str(workspace / "recipe.yaml"), "--out", str(out), "-q")[0] == 0
    sets = [
        f"data.math.path={workspace / 'math.jsonl'}",
        f"data.general.0.path={workspace / 'general.txt'}",
        f"evaluation.math.path={workspace / 'eval.jsonl'}",
        f"evaluation.general.0.path={workspace / 'general.txt'}",
        "mask.top_k=0.2",
    ]  # a different recipe than the lock's: the hashes must not match
    args = [
        "reproduce",
        str(out / "checkpoint" / "README.md"),
        "--base",
        str(workspace / "base"),
        "--out",
        str(tmp_path / "again"),
        "-q",
    ]
    for s in sets:
        args += ["--set", s]
    code, text = _run(*args)
    assert code == 1, text
    assert "re-run against the lock: mask DIFFERS" in text and "differs" in text and "reproduced: NO" in text
    assert "all match" in text  # the folder itself is intact: the re-run is what differs


def test_reproduce_of_a_card_reads_the_lock_it_names_and_refuses_a_changed_one(workspace, tmp_path):
    out = workspace / "out"
    if not out.exists():
        assert _run("run", str(workspace / "recipe.yaml"), "--out", str(out), "-q")[0] == 0
    from mathneuro_edit.runs.reproduce import read_any_lock

    card = tmp_path / "card"
    card.mkdir()
    for name in ("README.md", "mathneuro_recipe.lock.yaml"):
        (card / name).write_bytes((out / "checkpoint" / name).read_bytes())
    assert read_any_lock(card / "README.md")["mask_sha256"] == read_any_lock(out)["mask_sha256"]
    lock = card / "mathneuro_recipe.lock.yaml"
    lock.write_text(lock.read_text().replace("top_k: 0.", "top_k: 0.0", 1))
    code, text = _run("reproduce", str(card / "README.md"), "-q")
    assert code == 2 and "changed after the run" in text, text


def test_push_dry_run_touches_nothing(workspace, monkeypatch):
    out = workspace / "out"
    if not out.exists():
        assert _run("run", str(workspace / "recipe.yaml"), "--out", str(out), "-q")[0] == 0
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # any request would fail loudly
    code, text = _run("push", str(out), "--dry-run")
    assert code == 0 and "no repo id: pass --repo-id" in text  # no hub section: the plan still shows
    assert "DRY RUN" in text and "model.safetensors" in text
    code, text = _run("push", str(out))
    assert code == 2 and "--repo-id" in text  # a real push needs a target
    code, text = _run("push", str(out), "--repo-id", "me/tiny-boost", "--dry-run")
    assert code == 0 and "DRY RUN" in text and "model.safetensors" in text and "README.md" in text, text
    code, text = _run("push", str(out), "--repo-id", "me/tiny-boost", "--adapter", "--dry-run")
    assert code == 0 and "adapter_model.safetensors" in text, text


def test_adapter_for_conv1d_model_is_refused_before_calibration(workspace, tmp_path, monkeypatch):
    import mathneuro_edit.runs.pipeline as pipeline

    model, tok = build("gpt2")
    model.save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    called = []
    monkeypatch.setattr(pipeline, "calibrate_step", lambda *a, **k: called.append(1))
    code, text = _run(
        "run",
        str(workspace / "recipe.yaml"),
        "--out",
        str(tmp_path / "o"),
        "-q",
        "--set",
        f"base.model={tmp_path / 'gpt2'}",
    )
    assert code == 2 and "outputs.adapter" in text and "conv1d" in text and not called, text
    assert not (tmp_path / "o").exists()


def test_embedded_default_runs_offline(tmp_path, monkeypatch):
    """The README's main job: the shipped organism on its own data, smaller samples to stay fast."""
    from mathneuro_edit.organism import organism_path

    if not (organism_path() / "model.safetensors").is_file():
        pytest.skip("organism model not built")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network may be needed
    out = tmp_path / "quick"
    code, text = _run("run", "--out", str(out), "-q", "--set", "data.samples=20", "--set", "evaluation.samples=20")
    assert code == 0, text
    ev = json.loads((out / "eval.json").read_text())
    assert ev["math"]["base"]["math_accuracy"] >= 0.9  # the shipped organism solves its held-out problems
    card = (out / "checkpoint" / "README.md").read_text()
    assert "license: apache-2.0" in card and "2410.16930" in card
    # the quickstart prunes the math-specific weights: math collapses, significantly, and the card says so first
    assert ev["math"]["comparison"]["significant"] is True and len(ev["math"]["edited"]["predictions"]) == 20
    assert ev["math"]["edited"]["math_accuracy"] <= 0.1
    loss = {k: ev["general"][k]["general_loss"] for k in ("base", "edited")}
    assert abs(loss["edited"] - loss["base"]) <= 0.05 * loss["base"], loss  # general text barely moves
    first = card.split("\n# ", 1)[1].split("\n\n", 2)[1]
    assert "The edit significantly lowered math accuracy (100.0% -> " in first and "on 20 problems of `math`" in first
    assert "paired exact McNemar p < 0.001" in first and "no significant effect" not in card, first
    # Wilson(20, 20) = 83.9-100.0; the change and its paired test in the same row
    assert "| `math` | math accuracy | 100.0% (20/20, 83.9-100.0) | " in card and "(significant) |" in card
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from mathneuro_edit import Mask

    base_sd = {k: v.clone() for k, v in AutoModelForCausalLM.from_pretrained(organism_path()).state_dict().items()}
    merged = (
        PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(organism_path()), out / "adapter")
        .merge_and_unload()
        .state_dict()
    )
    baked = AutoModelForCausalLM.from_pretrained(out / "checkpoint").state_dict()
    assert set(merged) == set(baked) == set(base_sd)
    mask = Mask.load(out / "mask.safetensors")
    assert mask.total()[0] > 0
    for n, w in base_sd.items():
        assert torch.equal(merged[n], baked[n]), n  # the adapter and the baked checkpoint are the same edit
        # the edit itself: the quickstart's prune (x0) on the mask's entries, every other weight untouched
        expect = torch.where(mask[n], torch.zeros_like(w), w) if n in mask else w
        assert torch.equal(baked[n], expect), n


def test_run_from_sweep_records_the_evidence_or_refuses(workspace, tmp_path):
    from mathneuro_edit.data.sources import problem_sha256
    from mathneuro_edit.recipe.io import load_recipe
    from mathneuro_edit.runs.sweep.problems import sweep_problems
    from tests.runs._sweep_json import passed_confirmation, release_mask_sha256

    recipe = str(workspace / "recipe.yaml")
    arith = [
        "--set",
        "evaluation.math=arithmetic",
        "--set",
        "sweep.selection_samples=3",
        "--set",
        "sweep.confirmation_samples=8",
    ]
    sw = tmp_path / "sw"
    code, text = _run("sweep", recipe, "--out", str(sw), "--top-k", "0.05", "--scale", "1.1", *arith, "-q")
    assert code == 0, text
    rows = json.loads((sw / "sweep.json").read_text())
    _, sel, conf = sweep_problems(load_recipe(recipe, [a for a in arith if a != "--set"]))
    assert rows["selection"]["problems_sha256"] == [problem_sha256(p) for p in sel]
    if rows["best"] is None:  # the random tiny model confirms nothing: the release is refused, in one line
        code, text = _run("run", recipe, "--out", str(tmp_path / "r0"), "--from-sweep", str(sw), "-q")
        assert code == 2 and "sweep.json: nothing was confirmed (nothing confirmed:" in text, text
        assert len(text.strip().splitlines()) == 1 and not (tmp_path / "r0").exists()
    # a sweep whose confirmation passed (constructed: this model cannot gain): 6 right only after, p = 1/32
    rows["candidate"] = rows["best"] = 0
    hashes = [problem_sha256(p) for p in conf]
    assert len(hashes) == 8
    # and it beat the general-specific control 6 to 0, on the mask this release computes (another one is refused)
    rows["confirmation"] = passed_confirmation(hashes, release_mask_sha256(load_recipe(recipe)))
    (sw / "sweep.json").write_text(json.dumps(rows))
    out = tmp_path / "rel"
    code, text = _run(
        "run", recipe, "--out", str(out), "--from-sweep", str(sw), "--set", "evaluation.math=arithmetic", "-q"
    )
    assert code == 0, text
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    assert lock["recipe"]["mask"]["top_k"] == 0.05 and lock["recipe"]["edit"]["scale"] == 1.1  # the confirmed one
    ev = lock["sweep"]
    # the counts, not the per-problem lists: those stay in the sweep folder, whose sweep.json the lock pins
    assert (
        "problems_sha256" not in json.dumps(ev)
        and ev["sweep_sha256"] == hashlib.sha256((sw / "sweep.json").read_bytes()).hexdigest()
    )
    assert (ev["selection"]["n"], ev["confirmation"]["n"]) == (3, 8)
    # the model the sweep measured, by content (issue 46): the workspace's base, whose safetensors the lock records
    assert ev["base_identity"] == rows["base_identity"] == {"weights_sha256": lock["base"]["weights_sha256"]}
    # the run evaluates the first 4 arithmetic problems of seed 0: the sweep's 3 selection problems and 1 more
    assert ev["evaluation_overlap"] == {"n": 4, "selection": 3, "confirmation": 1}
    assert ev["mask_matches_confirmation"] is True and ev["confirmation"]["mask_sha256"] == lock["mask_sha256"]
    card = (out / "checkpoint" / "README.md").read_text()
    assert "## Evidence for the boost" in card
    assert "confirmed on 8 other problems** that played no part in choosing it" in card
    assert "| base | 12.5% (1/8, " in card and "| edited | 87.5% (7/8, " in card
    assert "two-sided exact McNemar p = 0.0312 (confirmed: p < 0.05)" in card
    assert "**The evaluation below shares 3 of its 4 problems with the selection problems" in card
    assert "is not a confirmation" in card and "significantly raised" not in card
    # the Hub's number is the confirmed one (issue 46 item 3); the own evaluation is never called significant
    from huggingface_hub import ModelCard

    results = ModelCard.load(out / "checkpoint" / "README.md").data.eval_results
    confirmed = [(r.metric_name, r.metric_value, r.dataset_args["n"], r.metric_args["correct"]) for r in results[:2]]
    assert confirmed == [
        ("math accuracy, this model", 0.875, 8, 7),
        ("math accuracy, base model (unedited) for comparison", 0.125, 8, 1),
    ]
    assert "math accuracy" not in [r.metric_name for r in results] and "(significant)" not in card
    code, text = _run("run", recipe, "--out", str(tmp_path / "r1"), "--from-sweep", str(sw), "--set", "edit.scale=2")
    assert code == 2 and "--from-sweep takes top_k and the edit from the sweep" in text
    code, text = _run("run", recipe, "--out", str(tmp_path / "r1"), "--from-sweep", str(sw), "--dry-run")
    assert code == 0 and not (tmp_path / "r1").exists(), text
    # a hand-edited "confirmation" whose counts do not give p < alpha is refused
    rows["confirmation"]["edited_only"] = 4
    (sw / "sweep.json").write_text(json.dumps(rows))
    code, text = _run("run", recipe, "--out", str(tmp_path / "r2"), "--from-sweep", str(sw), "-q")
    assert code == 2 and "the file was edited: re-run the sweep" in text and len(text.strip().splitlines()) == 1
