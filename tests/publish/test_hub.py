"""push_to_hub against a local fake Hub (tests/_fakehub.py): the REAL huggingface_hub client, a recording
http.server on 127.0.0.1 that keeps repo state (adds, deletes, LFS, branches, pull requests, visibility)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import save_file

from mathneuro_edit.errors import InputError, MathNeuroEditError
from mathneuro_edit.publish.card import (
    CardSource,
    build_card,
    card_for_folder,
    summarize_edit,
)
from mathneuro_edit.publish.hub import push_to_hub
from mathneuro_edit.publish.lock import build_lock
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.recipe.schema import recipe_sha256
from tests._fakehub import TOKEN, FakeHub, _committed, relock

EXPECTED_FILES = {
    "README.md",
    "adapter/adapter_config.json",
    "config.json",
    "mathneuro_recipe.lock.yaml",
    "model.safetensors",
}


def test_push_sends_one_commit_with_every_file(fake_hub: FakeHub, out_dir: Path) -> None:
    result = push_to_hub(out_dir, "me/organism-boost", private=True, revision="v1", token=TOKEN)
    sha = recipe_sha256(quickstart_recipe())

    create = [r for r in fake_hub.requests if r["path"] == "/api/repos/create"]
    assert len(create) == 1
    assert json.loads(create[0]["body"]) == {
        "name": "organism-boost",
        "organization": "me",
        "visibility": "private",
        "type": "model",
    }
    branches = [r["path"] for r in fake_hub.requests if "/branch/" in r["path"]]
    assert branches == ["/api/models/me/organism-boost/branch/v1"]
    commit_reqs = [r for r in fake_hub.requests if "/commit/" in r["path"]]
    assert [r["path"] for r in commit_reqs] == ["/api/models/me/organism-boost/commit/v1"]

    header = fake_hub.commits[0][0]
    assert header["key"] == "header" and sha in header["value"]["summary"]
    files = _committed(fake_hub)
    assert set(files) == EXPECTED_FILES
    for rel, content in files.items():
        if rel != "README.md":  # the card is rendered for the target repo (test_pushed_card_...)
            assert content == (out_dir / rel).read_bytes(), rel
    assert files["README.md"].decode() == card_for_folder(out_dir, repo_id="me/organism-boost").content
    assert "model.safetensors" in {line["value"]["path"] for line in fake_hub.commits[0] if line["key"] == "lfsFile"}

    repo = fake_hub.repos["me/organism-boost"]
    assert result.dry_run is False and result.commit_oid == repo.heads["v1"] and result.revision == "v1"
    assert repo.private and set(repo.refs["v1"]) == EXPECTED_FILES | {".gitattributes"}
    assert {p for p, _ in result.files} == EXPECTED_FILES and sha in result.commit_message


def test_token_only_in_authorization_headers(fake_hub: FakeHub, out_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)  # the token comes from the environment this time
    result = push_to_hub(out_dir, "me/organism-boost")
    assert fake_hub.requests
    for r in fake_hub.requests:
        assert TOKEN not in r["path"] and TOKEN.encode() not in r["body"]
        for name, value in r["headers"].items():
            if name != "authorization":
                assert TOKEN not in value, name
        if not r["path"].startswith("/lfs-upload/"):  # pre-signed storage URLs get no credentials
            assert r["headers"].get("authorization") == f"Bearer {TOKEN}"
    assert all(TOKEN.encode() not in content for content in _committed(fake_hub).values())
    assert TOKEN not in repr(result) and TOKEN not in result.describe()
    assert not any(TOKEN in p.read_text(errors="ignore") for p in out_dir.rglob("*") if p.is_file())
    # no revision asked: no branch created, commit to main, public repo
    assert not any("/branch/" in r["path"] for r in fake_hub.requests)
    create = [r for r in fake_hub.requests if r["path"] == "/api/repos/create"]
    assert json.loads(create[0]["body"])["visibility"] == "public"
    assert result.revision == "main" and fake_hub.requests[-1]["path"].endswith("/commit/main")


def test_missing_token_fails_before_any_request(fake_hub: FakeHub, out_dir: Path) -> None:
    with pytest.raises(InputError, match="no Hugging Face token.*HF_TOKEN"):
        push_to_hub(out_dir, "me/organism-boost")
    assert fake_hub.requests == []


def test_dry_run_touches_nothing(fake_hub: FakeHub, out_dir: Path) -> None:
    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    result = push_to_hub(out_dir, "me/organism-boost", dry_run=True, commit_message="first release")
    assert {r["method"] for r in fake_hub.requests} == {"GET"} and fake_hub.repos == {}  # it only looked
    assert result.remote == "new" and result.deletes == []
    assert result.dry_run and result.commit_oid is None
    sizes = dict(result.files)
    assert set(sizes) == EXPECTED_FILES and sizes["model.safetensors"] == (out_dir / "model.safetensors").stat().st_size
    assert result.commit_message.startswith("first release")
    assert recipe_sha256(quickstart_recipe()) in result.commit_message
    assert result.card_metadata == ModelCard.load(out_dir / "README.md").data.to_dict()
    assert "DRY RUN" in result.describe() and "model.safetensors" in result.describe()
    assert before == {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize(("status", "pattern"), [(401, "rejected the token"), (403, "may not write to me/x")])
def test_hub_errors_become_clear_input_errors(fake_hub: FakeHub, out_dir: Path, status: int, pattern: str) -> None:
    fake_hub.fail["/api/repos/create"] = (status, None)
    fake_hub.fail["/api/models/me/x"] = (404, "RepoNotFound")  # create_repo then looks the repo up: not there
    with pytest.raises(InputError, match=pattern) as info:
        push_to_hub(out_dir, "me/x", token=TOKEN)
    assert TOKEN not in str(info.value)
    assert fake_hub.commits == []


def test_commit_on_missing_repo_is_an_input_error(fake_hub: FakeHub, out_dir: Path) -> None:
    fake_hub.fail["/api/models/me/x/preupload"] = (404, "RepoNotFound")
    with pytest.raises(InputError, match="me/x: repository not found"):
        push_to_hub(out_dir, "me/x", token=TOKEN)
    fake_hub.fail["/api/models/me/x/preupload"] = (404, None)  # a bare 404 is still the user's to fix
    with pytest.raises(InputError, match="me/x: not found on the Hub"):
        push_to_hub(out_dir, "me/x", token=TOKEN)
    assert fake_hub.commits == []


def test_not_an_output_folder(tmp_path: Path, out_dir: Path, fake_hub: FakeHub) -> None:
    with pytest.raises(InputError, match="output folder not found"):
        push_to_hub(tmp_path / "missing", "me/x", token=TOKEN)
    (tmp_path / "README.md").write_text("# hi")
    with pytest.raises(InputError, match="no mathneuro_recipe.lock.yaml here; pass the run folder"):
        push_to_hub(tmp_path, "me/x", token=TOKEN)
    lock_only = tmp_path / "lock-only"
    lock_only.mkdir()
    shutil.copy(out_dir / "mathneuro_recipe.lock.yaml", lock_only)
    with pytest.raises(InputError, match="no README.md"):
        push_to_hub(lock_only, "me/x", token=TOKEN)
    assert fake_hub.requests == []


def test_bad_repo_id(out_dir: Path, fake_hub: FakeHub) -> None:
    with pytest.raises(InputError, match="not a valid Hub repo id"):
        push_to_hub(out_dir, "me/x/y z", token=TOKEN)
    assert fake_hub.requests == []


@pytest.mark.parametrize("repo_id", ["", "  "])
def test_an_empty_repo_id_is_refused_not_replaced_by_the_recipe_s(
    out_dir: Path, fake_hub: FakeHub, repo_id: str
) -> None:
    """Issue 48: `push --repo-id ''` (an unset shell variable) silently pushed to the recipe's hub.repo_id."""
    with pytest.raises(InputError, match=r"^--repo-id: empty; pass you/name, or leave --repo-id out"):
        push_to_hub(out_dir, repo_id, token=TOKEN)
    assert fake_hub.requests == []


def test_a_config_naming_a_local_path_is_not_published(fake_hub: FakeHub, out_dir: Path) -> None:
    (out_dir / "adapter" / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": "/home/alice/models/llama"})
    )
    relock(out_dir)  # as if the run had written it
    with pytest.raises(InputError, match=r"adapter/adapter_config.json: base_model_name_or_path is a local path"):
        push_to_hub(out_dir, "me/x", token=TOKEN)
    assert fake_hub.requests == []
    (out_dir / "adapter" / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.2-1B"})
    )
    relock(out_dir)
    assert push_to_hub(out_dir, "me/x", dry_run=True).dry_run


PLACEHOLDERS = ("PATH/TO", "THIS/MODEL", "you/name", "<repo", "YOUR_")


def _pushed_card(hub: FakeHub) -> ModelCard:
    """The README.md of the (single) commit, downloaded back and parsed as huggingface_hub renders it."""
    return ModelCard(_committed(hub)["README.md"].decode("utf-8"))


def test_pushed_card_loads_the_repo_and_has_no_placeholder_or_local_path(fake_hub: FakeHub, tmp_path: Path) -> None:
    """A real run's folders (the organism, a local data file), pushed, downloaded again and rendered."""
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    private = tmp_path / "home-of-alice" / "data"
    private.mkdir(parents=True)
    from mathneuro_edit.organism.data import math_texts

    (private / "math.txt").write_text("\n\n".join(math_texts(12, seed=0, split="train")) + "\n")
    out = tmp_path / "run"
    sets = [
        "data.samples=4",
        "evaluation.samples=2",
        "evaluation.max_new_tokens=4",
        f"data.math={{path: '{private / 'math.txt'}'}}",
    ]
    result = CliRunner().invoke(main, ["run", "--out", str(out), "-q", *[a for s in sets for a in ("--set", s)]])
    assert result.exit_code == 0, result.output
    for sub, flag in (("checkpoint", []), ("adapter", ["--adapter"])):
        before = (out / sub / "README.md").read_bytes()
        fake_hub.commits.clear()
        pushed = CliRunner(env={"HF_TOKEN": TOKEN}).invoke(main, ["push", str(out), "--repo-id", "me/name", *flag])
        assert pushed.exit_code == 0, pushed.output
        card = _pushed_card(fake_hub)
        text = card.content
        loads = 'PeftModel.from_pretrained(base, "me/name")' if sub == "adapter" else 'from_pretrained("me/name")'
        assert loads in text, sub
        assert "mathneuro-edit reproduce me/name --set data.math.path=math.txt" in text
        assert not [p for p in PLACEHOLDERS if p in text], sub
        assert str(tmp_path) not in text and "home-of-alice" not in text
        assert "pip install mathneuro-edit" not in text and "not on PyPI yet" in text
        for needed in (
            "2410.16930",
            "top_k | 0.05",
            "scale | 0 (prune)",
            "weights edited",
            "| `torch` |",
            "texts sha256",
            "mathneuro-edit reproduce",
            "```yaml\nbase:\n  model: organism",
        ):
            assert needed in text, (sub, needed)
        file_sha = hashlib.sha256((private / "math.txt").read_bytes()).hexdigest()
        assert f"`{file_sha}`" in text  # the local data file, by content hash
        assert card.data.to_dict()["library_name"] == ("peft" if sub == "adapter" else "transformers")
        assert (out / sub / "README.md").read_bytes() == before  # the local folder is not changed
    assert "organism_path()" in text  # the adapter card names its base and how to load it


def test_adapter_card_names_its_base(tmp_path: Path) -> None:
    """Hub base: base_model metadata; local base: architecture, content hash and how to point PEFT at it."""
    recipe = quickstart_recipe(["base.model=org/base-model"])
    summary = summarize_edit({"a.q_proj.weight": (3, 64)}, model_params=64)
    lock = build_lock(
        recipe,
        base_revision="f" * 40,
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files={},
        edit_summary=summary,
    )
    card = build_card(
        CardSource(recipe=recipe, lock=lock, edit_summary=summary),
        "adapter",
        base_model_id="org/base-model",
        repo_id="me/name",
    )
    assert card.data.to_dict()["base_model"] == "org/base-model"
    assert card.data.to_dict()["base_model_relation"] == "adapter"
    assert 'AutoModelForCausalLM.from_pretrained("org/base-model")' in card.content
    assert 'PeftModel.from_pretrained(base, "me/name")' in card.content and "f" * 40 in card.content
    base = tmp_path / "private" / "my-base"
    base.mkdir(parents=True)
    save_file({"w": torch.ones(2)}, str(base / "model.safetensors"))
    (base / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    recipe = quickstart_recipe([f"base.model={base}"])
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s",
        mask_sha256="m",
        output_files={},
        edit_summary=summary,
    )
    card = build_card(
        CardSource(recipe=recipe, lock=lock, edit_summary=summary), "adapter", base_model_id=None, repo_id="me/name"
    )
    sha = hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()
    assert "base_model" not in card.data.to_dict() and str(base) not in card.content
    assert "`LlamaForCausalLM`" in card.content and f"`{sha}`" in card.content
    assert 'base_dir = os.environ["BASE_MODEL_DIR"]' in card.content
    assert '--base "$BASE_MODEL_DIR"' in card.content


def test_push_mirrors_the_folder_in_one_commit(fake_hub: FakeHub, out_dir: Path) -> None:
    """A second push deletes what the folder no longer holds (a stale shard), in the same commit as the adds."""
    (out_dir / "model-00002-of-00002.safetensors").write_bytes(b"stale shard")
    relock(out_dir)  # each push is of a run's folder as the run wrote it
    push_to_hub(out_dir, "me/m", token=TOKEN)
    assert "model-00002-of-00002.safetensors" in fake_hub.files("me/m")
    (out_dir / "model-00002-of-00002.safetensors").unlink()
    (out_dir / "adapter" / "adapter_config.json").unlink()
    relock(out_dir)
    plan = push_to_hub(out_dir, "me/m", dry_run=True)
    assert [p for p, _ in plan.deletes] == ["adapter/adapter_config.json", "model-00002-of-00002.safetensors"]
    assert dict(plan.deletes)["model-00002-of-00002.safetensors"] == len(b"stale shard")
    assert "2 file(s) it holds now are deleted in the same commit" in plan.describe()
    assert "  delete" in plan.describe() and "model-00002-of-00002.safetensors" in plan.describe()
    n = len(fake_hub.commits)
    result = push_to_hub(out_dir, "me/m", token=TOKEN)
    assert len(fake_hub.commits) == n + 1  # adds and deletes: one commit
    keys = {line["key"] for line in fake_hub.commits[-1]}
    assert {"deletedFile", "lfsFile", "file"} <= keys
    assert set(fake_hub.files("me/m")) == {p for p, _ in result.files} | {".gitattributes"}
    assert result.deletes == plan.deletes


def test_dry_run_without_repo_id_previews_the_plan(fake_hub: FakeHub, out_dir: Path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    result = push_to_hub(out_dir, None, dry_run=True)
    assert result.repo_id is None and {p for p, _ in result.files} == EXPECTED_FILES and fake_hub.requests == []
    assert "no repo id" in result.describe()
    cli = CliRunner().invoke(main, ["push", str(out_dir), "--dry-run", "--json"])
    assert cli.exit_code == 0, cli.output
    plan = json.loads(cli.stdout)
    assert plan["repo_id"] is None and plan["dry_run"] is True
    assert {a["path"] for a in plan["adds"]} == EXPECTED_FILES
    assert plan["total_bytes"] == sum(a["size"] for a in plan["adds"])
    with pytest.raises(InputError, match="no target repo"):
        push_to_hub(out_dir, None, token=TOKEN)


def test_symlink_out_of_the_folder_is_refused(fake_hub: FakeHub, out_dir: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    (out_dir / "notes.txt").symlink_to(secret)
    with pytest.raises(InputError, match=r"notes.txt: a symbolic link to .*secret.txt, outside the folder") as e:
        push_to_hub(out_dir, "me/m", token=TOKEN)
    assert "\n" not in str(e.value) and fake_hub.requests == []
    (out_dir / "notes.txt").unlink()
    (out_dir / "inside.json").symlink_to(out_dir / "config.json")  # a link inside the folder is a file of it
    relock(out_dir)
    assert "inside.json" in dict(push_to_hub(out_dir, "me/m", dry_run=True).files)


def test_token_never_in_an_error_message(fake_hub: FakeHub, out_dir: Path) -> None:
    """The Hub (or a proxy) echoes the token in an error: neither the exception nor the CLI shows it."""
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main
    from mathneuro_edit.errors import MathNeuroEditError

    fake_hub.fail["/api/models/me/m"] = (500, None)
    fake_hub.fail_message = f"internal error while checking token {TOKEN}"
    with pytest.raises(MathNeuroEditError) as info:
        push_to_hub(out_dir, "me/m", token=TOKEN)
    assert TOKEN not in str(info.value) and "***" in str(info.value)
    cli = CliRunner(env={"HF_TOKEN": TOKEN}).invoke(main, ["push", str(out_dir), "--repo-id", "me/m"])
    assert cli.exit_code == 3 and TOKEN not in cli.output and "***" in cli.output, cli.output
    dry = CliRunner(env={"HF_TOKEN": TOKEN}).invoke(
        main, ["push", str(out_dir), "--repo-id", "me/m", "--dry-run", "--json"]
    )
    assert dry.exit_code == 0 and TOKEN not in dry.output and "could not" not in json.loads(dry.stdout)["remote"]


def test_visibility_branch_commit_message_and_pull_request(fake_hub: FakeHub, out_dir: Path) -> None:
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    run = CliRunner(env={"HF_TOKEN": TOKEN}).invoke
    assert run(main, ["push", str(out_dir), "--repo-id", "me/m", "--private"]).exit_code == 0
    assert fake_hub.repos["me/m"].private
    assert run(main, ["push", str(out_dir), "--repo-id", "me/m"]).exit_code == 0  # no flag: left as is
    assert fake_hub.repos["me/m"].private
    assert run(main, ["push", str(out_dir), "--repo-id", "me/m", "--public"]).exit_code == 0
    assert not fake_hub.repos["me/m"].private
    main_before = fake_hub.files("me/m")
    (out_dir / "config.json").write_text('{"model_type": "llama", "changed": true}')
    relock(out_dir)  # a new run's output
    pr = run(main, ["push", str(out_dir), "--repo-id", "me/m", "--create-pr", "--commit-message", "Try a change"])
    assert pr.exit_code == 0, pr.output
    assert "pull request:" in pr.output and "discussions/1" in pr.output
    assert fake_hub.files("me/m") == main_before  # main untouched; the change is in the PR
    assert b'"changed": true' in fake_hub.files("me/m", "refs/pr/1")["config.json"]
    assert fake_hub.commits[-1][0]["value"]["summary"].startswith("Try a change (recipe sha256 ")
    br = run(main, ["push", str(out_dir), "--repo-id", "me/m", "--branch", "exp"])
    assert br.exit_code == 0 and b'"changed"' in fake_hub.files("me/m", "exp")["config.json"]


def test_default_repo_ids_differ_per_artifact(fake_hub: FakeHub, tmp_path: Path) -> None:
    """A run with an adapter and a GGUF: three repos from the recipe's hub.repo_id, each overridable."""
    from click.testing import CliRunner

    from mathneuro_edit.cli.main import main

    out = tmp_path / "run"
    sets = [
        "data.samples=4",
        "evaluation.samples=2",
        "evaluation.max_new_tokens=4",
        "outputs.gguf=F32",
        "hub={repo_id: me/organism-prune}",
    ]
    made = CliRunner().invoke(main, ["run", "--out", str(out), "-q", *[a for s in sets for a in ("--set", s)]])
    assert made.exit_code == 0, made.output
    run = CliRunner(env={"HF_TOKEN": TOKEN}).invoke
    for flag, repo in (
        ([], "me/organism-prune"),
        (["--adapter"], "me/organism-prune-adapter"),
        (["--gguf"], "me/organism-prune-GGUF"),
    ):
        dry = run(main, ["push", str(out), *flag, "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        assert json.loads(dry.stdout)["repo_id"] == repo
        assert run(main, ["push", str(out), *flag]).exit_code == 0
    checkpoint, adapter, gguf = (
        set(fake_hub.files(r)) for r in ("me/organism-prune", "me/organism-prune-adapter", "me/organism-prune-GGUF")
    )
    assert "model.safetensors" in checkpoint and not any(p.endswith(".gguf") for p in checkpoint)
    assert "adapter_config.json" not in checkpoint and "adapter_config.json" in adapter
    assert "model.safetensors" not in adapter and "config.json" not in adapter
    assert gguf == {
        ".gitattributes",
        "README.md",
        "mathneuro_recipe.lock.yaml",
        "Organism-1.1M-MathNeuro-Prune-F32.gguf",
    }
    meta = ModelCard(fake_hub.files("me/organism-prune-GGUF")["README.md"].decode()).data.to_dict()
    assert meta["base_model"] == "me/organism-prune" and meta["base_model_relation"] == "quantized"
    other = run(main, ["push", str(out), "--gguf", "--repo-id", "me/other-GGUF"])
    assert other.exit_code == 0 and "me/other-GGUF" in fake_hub.repos
    both = run(main, ["push", str(out), "--gguf", "--adapter", "--dry-run"])
    assert both.exit_code == 2 and "one at a time" in both.output


# ---------------------------------------------------------------------------- a Hub that is slow, busy or failing


def test_push_retries_429_honouring_retry_after_then_5xx_with_backoff(
    fake_hub: FakeHub, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mathneuro_edit.publish.hub_requests as hub_module  # the request layer: its sleep between tries

    waits: list[float] = []
    monkeypatch.setattr(hub_module, "_sleep", waits.append)
    fake_hub.fail_times["/api/models/me/busy/commit/"] = [(429, {"Retry-After": "7"}), (503, {})]
    result = push_to_hub(out_dir, "me/busy", token=TOKEN)
    assert waits == [7.0, 2.0]  # the Hub's Retry-After, then the second backoff step (1, 2, 4, 8 s)
    assert len(fake_hub.commits) == 1 and result.commit_oid == fake_hub.repos["me/busy"].heads["main"]
    assert set(fake_hub.files("me/busy")) == EXPECTED_FILES | {".gitattributes"}


def test_push_gives_up_on_a_failing_upload_with_one_line_naming_the_status(
    fake_hub: FakeHub, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.utils._http as client_http

    import mathneuro_edit.publish.hub_requests as hub_module  # the request layer: its sleep between tries

    waits: list[float] = []
    monkeypatch.setattr(hub_module, "_sleep", waits.append)
    monkeypatch.setattr(client_http.time, "sleep", lambda s: None)  # the client's own backoff, if it has one
    fake_hub.fail_times["/lfs-upload/"] = [(500, {})] * 200
    with pytest.raises(MathNeuroEditError) as caught:
        push_to_hub(out_dir, "me/broken", token=TOKEN)
    message = str(caught.value)
    assert not isinstance(caught.value, InputError)  # the Hub's failure, not the user's input: exit 3
    assert message.startswith("the Hub answered 500 for me/broken") and "5 tries); retry later" in message
    assert waits == [1.0, 2.0, 4.0, 8.0] and TOKEN not in message
    assert fake_hub.commits == []  # nothing half-committed


def test_push_times_out_on_a_hub_that_never_answers(
    fake_hub: FakeHub, out_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    import huggingface_hub.utils._http as client_http

    import mathneuro_edit.publish.hub_requests as hub_module  # the request layer: its sleep between tries

    monkeypatch.setattr(hub_module, "_sleep", lambda s: None)
    monkeypatch.setattr(client_http.time, "sleep", lambda s: None)  # the client's own backoff between its tries
    monkeypatch.setenv("MATHNEURO_EDIT_HUB_TIMEOUT", "0.3")
    fake_hub.delay["/api/models/"] = 2.0
    start = time.monotonic()
    with pytest.raises(MathNeuroEditError, match=r"did not answer within 0.3 s .*raise MATHNEURO_EDIT_HUB_TIMEOUT"):
        push_to_hub(out_dir, "me/silent", token=TOKEN)
    assert time.monotonic() - start < 20  # the client's few tries of 0.3 s each, never forever
    monkeypatch.setenv("MATHNEURO_EDIT_HUB_TIMEOUT", "soon")
    with pytest.raises(InputError, match=r"MATHNEURO_EDIT_HUB_TIMEOUT='soon': not a number of seconds"):
        push_to_hub(out_dir, "me/silent", token=TOKEN)
