"""The whole release, as a user does it, through the REAL huggingface_hub client against the fake Hub
(tests/_fakehub.py, which keeps repo state): a Hub base -> `run` -> `push` the checkpoint, the adapter and the GGUF
to their three repos -> download each with `snapshot_download` -> load the checkpoint with
`AutoModelForCausalLM.from_pretrained(repo_id)` (+ a forward), the adapter with `AutoPeftModelForCausalLM` (equal to
the checkpoint), read the GGUF with the gguf package -> push again after a change: no stale file remains ->
`reproduce REPO` against the same Hub, and a tampered repo is not reproduced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from huggingface_hub import CommitOperationAdd, HfApi, ModelCard, snapshot_download

from mathneuro_edit.cli.main import main
from mathneuro_edit.organism import organism_path
from tests._fakehub import TOKEN, FakeHub

gguf = pytest.importorskip("gguf")

BASE_CARD = """---
license: other
license_name: organism-license
license_link: https://example.org/organism-license
language:
- en
datasets:
- org/organism-corpus
library_name: transformers
---
# organism base
"""
SETS = [
    "base.model=org/base",
    "data.samples=4",
    "evaluation.samples=2",
    "evaluation.max_new_tokens=4",
    "outputs.gguf=F32",
    "hub={repo_id: me/edit}",
]
IDS = torch.tensor([[1, 40, 41, 42, 43, 44]])


def _cli(*args: object, env: dict | None = None) -> tuple[int, str, str]:
    result = CliRunner(env=env).invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.output


def _publish_base(hub: FakeHub) -> str:
    api = HfApi(token=TOKEN)
    api.create_repo("org/base")
    ops = [
        CommitOperationAdd(p.name, str(p))
        for p in sorted(organism_path().iterdir())
        if p.is_file() and p.name != "README.md"
    ]
    ops.append(CommitOperationAdd("README.md", BASE_CARD.encode()))
    return api.create_commit("org/base", ops, commit_message="base").oid


def _run(out: Path, *extra: str) -> None:
    code, _, text = _cli("run", "--out", out, "-q", *[a for s in (*SETS, *extra) for a in ("--set", s)])
    assert code == 0, text


def _push(out: Path, *flags: str) -> dict:
    code, stdout, text = _cli("push", out, *flags, "--json", env={"HF_TOKEN": TOKEN})
    assert code == 0, text
    assert TOKEN not in text
    return json.loads(stdout)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


@pytest.mark.slow
def test_release_round_trip(fake_hub: FakeHub, tmp_path: Path) -> None:
    from peft import AutoPeftModelForCausalLM
    from transformers import AutoModelForCausalLM

    base_commit = _publish_base(fake_hub)
    out = tmp_path / "run"
    _run(out)
    adapter_config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    lock = yaml.safe_load((out / "mathneuro_recipe.lock.yaml").read_text())
    assert lock["base"]["revision"] == base_commit
    assert adapter_config["base_model_name_or_path"] == "org/base"
    assert adapter_config["revision"] == base_commit  # pinned: the adapter does not follow later base commits

    plans = {
        kind: _push(out, *flags)
        for kind, flags in (("checkpoint", []), ("adapter", ["--adapter"]), ("gguf", ["--gguf"]))
    }
    assert {k: p["repo_id"] for k, p in plans.items()} == {
        "checkpoint": "me/edit",
        "adapter": "me/edit-adapter",
        "gguf": "me/edit-GGUF",
    }

    # each repo, downloaded as a user does, holds exactly the artifact (+ the Hub's .gitattributes)
    local = {"checkpoint": out / "checkpoint", "adapter": out / "adapter"}
    for kind, repo in (("checkpoint", "me/edit"), ("adapter", "me/edit-adapter")):
        got = Path(snapshot_download(repo, local_dir=tmp_path / "dl" / kind))
        files = {p.relative_to(got).as_posix() for p in got.rglob("*") if p.is_file() and ".cache" not in p.parts}
        want = {p.name for p in local[kind].iterdir() if not p.name.endswith(".gguf")}
        assert files == want | {".gitattributes"}, kind
        for name in want - {"README.md"}:
            assert (got / name).read_bytes() == (local[kind] / name).read_bytes(), (kind, name)
    gguf_dir = Path(snapshot_download("me/edit-GGUF", local_dir=tmp_path / "dl" / "gguf"))
    gguf_name = "Base-1.1M-MathNeuro-Prune-F32.gguf"
    assert sorted(p.name for p in gguf_dir.iterdir() if p.is_file()) == sorted(
        [".gitattributes", "README.md", "mathneuro_recipe.lock.yaml", gguf_name]
    )
    assert (gguf_dir / gguf_name).read_bytes() == (out / "checkpoint" / "model-F32.gguf").read_bytes()

    # the checkpoint loads from its repo id with plain transformers; the adapter with plain PEFT, equal to it
    model = AutoModelForCausalLM.from_pretrained("me/edit")
    want = _logits(model)
    assert torch.isfinite(want).all()
    peft_model = AutoPeftModelForCausalLM.from_pretrained("me/edit-adapter")
    torch.testing.assert_close(_logits(peft_model), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(_logits(peft_model.merge_and_unload()), want, rtol=0, atol=1e-6)

    # the GGUF reads back with the gguf package, with llama.cpp's general.* metadata
    reader = gguf.GGUFReader(str(gguf_dir / gguf_name))
    fields = {k: v.contents() for k, v in reader.fields.items()}
    assert fields["general.architecture"] == "llama" and fields["general.type"] == "model"
    assert fields["general.basename"] == "Base" and fields["general.size_label"] == "1.1M"
    assert fields["general.finetune"] == "MathNeuro-Prune"
    assert fields["general.license"] == "other" and fields["general.license.name"] == "organism-license"
    assert fields["general.base_model.count"] == 1 and fields["general.base_model.0.repo_url"].endswith("org/base")
    assert "mathneuro" in fields["general.tags"]
    assert len(reader.tensors) > 0

    # the cards: the base card's license fields, language and datasets; eval results the Hub reads; PEFT's tags
    cards = {r: ModelCard.load(r) for r in ("me/edit", "me/edit-adapter", "me/edit-GGUF")}
    for repo, card in cards.items():
        meta = card.data.to_dict()
        assert meta["license"] == "other" and meta["license_name"] == "organism-license", repo
        assert meta["license_link"] == "https://example.org/organism-license" and meta["language"] == ["en"], repo
        assert "org/organism-corpus" in meta["datasets"], repo
    ckpt_meta = cards["me/edit"].data
    assert ckpt_meta.base_model == "org/base" and ckpt_meta.to_dict()["base_model_relation"] == "finetune"
    metrics = {(r.dataset_type, r.metric_name): r.metric_value for r in ckpt_meta.eval_results}
    eval_json = json.loads((out / "eval.json").read_text())
    math, general = "mathneuro-edit-organism-math", "mathneuro-edit-organism-general"
    assert metrics[(math, "math accuracy")] == round(eval_json["math"]["edited"]["math_accuracy"], 6)
    assert not any("base model" in name for _, name in metrics)  # this model's results only
    assert (general, "general next-token loss") in metrics and (general, "KL(base || edited) per token") in metrics
    adapter_meta = cards["me/edit-adapter"].data.to_dict()
    assert adapter_meta["library_name"] == "peft" and adapter_meta["base_model_relation"] == "adapter"
    assert {"base_model:adapter:org/base", "shira", "peft"} <= set(adapter_meta["tags"])
    gguf_meta = cards["me/edit-GGUF"].data.to_dict()
    assert gguf_meta["base_model"] == "me/edit" and gguf_meta["base_model_relation"] == "quantized"
    assert (
        "PEFT only" in cards["me/edit-adapter"].text
        and "Not** vLLM, TGI, SGLang or llama.cpp" in cards["me/edit-adapter"].text
    )

    # reproduce REPO: the Hub's LFS sha256 (and the small files) against the lock, then the re-run
    for repo in ("me/edit", "me/edit-adapter", "me/edit-GGUF"):
        code, stdout, text = _cli("reproduce", repo, "-q", "--json")
        assert code == 0, (repo, text)
        report = json.loads(stdout)
        assert report["ok"] and set(report["files_checked"]["files"].values()) == {"match"}, repo
    lfs = fake_hub.requests
    assert any("blobs=" in r["path"] for r in lfs)  # model_info(files_metadata=True)

    # the base moves on (a new commit on main): reproduce re-runs at the commit the lock records
    from safetensors.torch import load_file, save_file

    weights = load_file(str(organism_path() / "model.safetensors"))
    first = next(iter(weights))
    weights[first] = weights[first] + 1.0
    moved = tmp_path / "moved.safetensors"
    save_file(weights, str(moved), metadata={"format": "pt"})
    HfApi(token=TOKEN).create_commit(
        "org/base", [CommitOperationAdd("model.safetensors", str(moved))], commit_message="new weights"
    )
    code, stdout, text = _cli("reproduce", "me/edit-adapter", "-q")
    assert code == 0 and stdout.strip().splitlines()[-1].startswith("reproduced: yes"), text

    # push again after a change (sharded, and another edit): no stale file remains in any repo
    again = tmp_path / "run2"
    _run(again, "outputs.max_shard_size=2MB", "edit.scale=1.1")
    assert not (again / "checkpoint" / "model.safetensors").exists()
    second = {
        kind: _push(again, *flags)
        for kind, flags in (("checkpoint", []), ("adapter", ["--adapter"]), ("gguf", ["--gguf"]))
    }
    assert "model.safetensors" in {d["path"] for d in second["checkpoint"]["deletes"]}
    assert gguf_name in {d["path"] for d in second["gguf"]["deletes"]}
    for kind, repo in (("checkpoint", "me/edit"), ("adapter", "me/edit-adapter")):
        names = set(fake_hub.files(repo))
        want = {p.name for p in (again / kind).iterdir() if not p.name.endswith(".gguf")}
        assert names == want | {".gitattributes"}, kind
    assert set(fake_hub.files("me/edit-GGUF")) == {
        ".gitattributes",
        "README.md",
        "mathneuro_recipe.lock.yaml",
        "Base-1.1M-MathNeuro-Scale1.1-F32.gguf",
    }
    model = AutoModelForCausalLM.from_pretrained("me/edit")  # the sharded checkpoint, from the Hub
    assert torch.isfinite(_logits(model)).all()

    # a tampered repo is never reproduced: the Hub's LFS sha256 differs from the lock
    shard = sorted(n for n in fake_hub.files("me/edit") if n.endswith(".safetensors"))[0]
    HfApi(token=TOKEN).create_commit(
        "me/edit", [CommitOperationAdd(shard, b"not the weights")], commit_message="tamper"
    )
    code, stdout, text = _cli("reproduce", "me/edit", "-q")
    assert code == 1, text
    assert f"  changed  {shard}" in stdout and "reproduced: NO: the files you have differ" in stdout
