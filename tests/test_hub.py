"""push_to_hub against a local fake Hub: the REAL huggingface_hub client, a recording http.server on 127.0.0.1.

The fake speaks the endpoints huggingface_hub 2.x calls for create_repo / create_branch / create_commit with Xet
disabled: repo creation, branch creation, README metadata validation, preupload (regular vs LFS), the LFS batch
API with a PUT upload, and the ndjson commit. Every request is recorded, so the tests check what was sent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard, constants
from safetensors.torch import save_file

from mathneuro_edit.publish.card import build_card, card_for_folder, summarize_edit, write_card
from mathneuro_edit.errors import InputError
from mathneuro_edit.publish.hub import push_to_hub
from mathneuro_edit.publish.lock import build_lock, output_hashes, write_lock
from mathneuro_edit.recipe.schema import recipe_sha256
from mathneuro_edit.recipe.io import quickstart_recipe

TOKEN = "hf_TESTsecretTOKEN0123456789abcdef"


class FakeHub:
    """Recorded requests + server-side state; ``fail`` makes the server refuse paths with a given status."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.lfs: dict[str, bytes] = {}
        self.commits: list[list[dict]] = []
        self.fail: dict[str, tuple[int, str | None]] = {}  # path prefix -> (status, X-Error-Code)
        self.url = ""


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                data = b""
                while (size := int(self.rfile.readline().strip() or b"0", 16)) > 0:
                    data += self.rfile.read(size)
                    self.rfile.readline()
                self.rfile.readline()
                return data
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _send(self, status: int, payload: object, error_code: str | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> None:
            body = self._body()
            headers = {k.lower(): v for k, v in self.headers.items()}
            hub.requests.append({"method": self.command, "path": self.path, "headers": headers, "body": body})
            path = self.path.split("?")[0]
            for prefix, (status, code) in hub.fail.items():
                if path.startswith(prefix):
                    return self._send(status, {"error": f"refused with {status}"}, code)
            if path == "/api/repos/create":
                req = json.loads(body)
                return self._send(200, {"url": f"{hub.url}/{req['organization']}/{req['name']}"})
            if "/branch/" in path or path == "/api/validate-yaml":
                return self._send(200, {"errors": [], "warnings": []})
            if "/preupload/" in path:
                files = json.loads(body)["files"]
                return self._send(200, {"files": [
                    {"path": f["path"], "shouldIgnore": False,
                     "uploadMode": "lfs" if f["path"].endswith(".safetensors") else "regular"} for f in files]})
            if path.endswith(".git/info/lfs/objects/batch"):
                objects = json.loads(body)["objects"]
                return self._send(200, {"transfer": "basic", "objects": [
                    {"oid": o["oid"], "size": o["size"],
                     "actions": {"upload": {"href": f"{hub.url}/lfs-upload/{o['oid']}"}}} for o in objects]})
            if path.startswith("/lfs-upload/"):
                hub.lfs[path.rsplit("/", 1)[1]] = body
                return self._send(200, {})
            if "/commit/" in path:
                hub.commits.append([json.loads(line) for line in body.splitlines() if line.strip()])
                repo = path.split("/api/models/")[1].split("/commit/")[0]
                return self._send(200, {"commitUrl": f"{hub.url}/{repo}/commit/{'a' * 40}", "commitOid": "a" * 40})
            return self._send(404, {"error": "not found"})

        do_GET = do_POST = do_PUT = _route

    return Handler


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # HfApi() reads constants.ENDPOINT when built (push_to_hub builds it per call); Xet off -> plain LFS protocol.
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-stored-token"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield hub
    server.shutdown()
    server.server_close()


@pytest.fixture()
def out_dir(tmp_path: Path) -> Path:
    """A small but real output folder: safetensors weights, config, adapter subfolder, card and lock."""
    out = tmp_path / "out"
    (out / "adapter").mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32).reshape(8, 8)}, str(out / "model.safetensors"))
    (out / "config.json").write_text('{"model_type": "llama"}')
    (out / "adapter" / "adapter_config.json").write_text('{"peft_type": "LORA"}')
    (out / ".partial.tmp").write_text("temp file: never published")
    recipe = quickstart_recipe()
    summary = summarize_edit({"a.q_proj.weight": (3, 64)}, model_params=64)
    lock = build_lock(recipe, base_revision=None, data_records={}, stats_sha256="s" * 64, mask_sha256="m" * 64,
                      output_files=output_hashes(out), base_weights={}, edit_summary=summary)
    write_lock(out, lock)
    card = build_card(recipe=recipe, lock=lock, base_model_id=None, kind="checkpoint", edit_summary=summary,
                      license="apache-2.0")
    write_card(out, card)
    return out


EXPECTED_FILES = {"README.md", "adapter/adapter_config.json", "config.json", "mathneuro_recipe.lock.yaml",
                  "model.safetensors"}


def _committed(hub: FakeHub) -> dict[str, bytes]:
    """Content of every file in the (single) commit, regular files decoded, LFS files from their PUT upload."""
    assert len(hub.commits) == 1
    files = {}
    for line in hub.commits[0][1:]:
        value = line["value"]
        if line["key"] == "file":
            files[value["path"]] = base64.b64decode(value["content"])
        else:
            assert line["key"] == "lfsFile"
            files[value["path"]] = hub.lfs[value["oid"]]
            assert hashlib.sha256(files[value["path"]]).hexdigest() == value["oid"]
    return files


def test_push_sends_one_commit_with_every_file(fake_hub: FakeHub, out_dir: Path) -> None:
    result = push_to_hub(out_dir, "me/organism-boost", private=True, revision="v1", token=TOKEN)
    sha = recipe_sha256(quickstart_recipe())

    create = [r for r in fake_hub.requests if r["path"] == "/api/repos/create"]
    assert len(create) == 1
    assert json.loads(create[0]["body"]) == {"name": "organism-boost", "organization": "me",
                                             "visibility": "private", "type": "model"}
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

    assert result.dry_run is False and result.commit_oid == "a" * 40 and result.revision == "v1"
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
    assert json.loads(fake_hub.requests[0]["body"])["visibility"] == "public"
    assert result.revision == "main" and fake_hub.requests[-1]["path"].endswith("/commit/main")


def test_missing_token_fails_before_any_request(fake_hub: FakeHub, out_dir: Path) -> None:
    with pytest.raises(InputError, match="no Hugging Face token.*HF_TOKEN"):
        push_to_hub(out_dir, "me/organism-boost")
    assert fake_hub.requests == []


def test_dry_run_touches_nothing(fake_hub: FakeHub, out_dir: Path) -> None:
    before = {p: p.read_bytes() for p in out_dir.rglob("*") if p.is_file()}
    result = push_to_hub(out_dir, "me/organism-boost", dry_run=True, commit_message="first release")
    assert fake_hub.requests == []
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


def test_not_an_output_folder(tmp_path: Path, fake_hub: FakeHub) -> None:
    with pytest.raises(InputError, match="no README.md"):
        push_to_hub(tmp_path, "me/x", token=TOKEN)
    (tmp_path / "README.md").write_text("# hi")
    with pytest.raises(InputError, match="lock file not found"):
        push_to_hub(tmp_path, "me/x", token=TOKEN)
    assert fake_hub.requests == []


def test_bad_repo_id(out_dir: Path, fake_hub: FakeHub) -> None:
    with pytest.raises(InputError, match="not a valid Hub repo id"):
        push_to_hub(out_dir, "me/x/y z", token=TOKEN)
    assert fake_hub.requests == []


def test_a_config_naming_a_local_path_is_not_published(fake_hub: FakeHub, out_dir: Path) -> None:
    (out_dir / "adapter" / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": "/home/alice/models/llama"}))
    with pytest.raises(InputError, match=r"adapter/adapter_config.json: base_model_name_or_path is a local path"):
        push_to_hub(out_dir, "me/x", token=TOKEN)
    assert fake_hub.requests == []
    (out_dir / "adapter" / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": "meta-llama/Llama-3.2-1B"}))
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
    sets = ["data.samples=4", "evaluation.samples=2", "evaluation.max_new_tokens=4", f"data.math={{path: '{private / 'math.txt'}'}}"]
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
        for needed in ("2410.16930", "top_k | 0.05", "scale | 0 (prune)", "weights edited", "| torch |",
                       "texts sha256", "mathneuro-edit reproduce", "```yaml\nbase:\n  model: organism"):
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
    lock = build_lock(recipe, base_revision="f" * 40, data_records={}, stats_sha256="s", mask_sha256="m",
                      output_files={}, edit_summary=summary)
    card = build_card(recipe=recipe, lock=lock, base_model_id="org/base-model", kind="adapter", edit_summary=summary,
                      repo_id="me/name")
    assert card.data.to_dict()["base_model"] == "org/base-model"
    assert card.data.to_dict()["base_model_relation"] == "adapter"
    assert 'AutoModelForCausalLM.from_pretrained("org/base-model")' in card.content
    assert 'PeftModel.from_pretrained(base, "me/name")' in card.content and "f" * 40 in card.content
    base = tmp_path / "private" / "my-base"
    base.mkdir(parents=True)
    save_file({"w": torch.ones(2)}, str(base / "model.safetensors"))
    (base / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    recipe = quickstart_recipe([f"base.model={base}"])
    lock = build_lock(recipe, base_revision=None, data_records={}, stats_sha256="s", mask_sha256="m",
                      output_files={}, edit_summary=summary)
    card = build_card(recipe=recipe, lock=lock, base_model_id=None, kind="adapter", edit_summary=summary,
                      repo_id="me/name")
    sha = hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()
    assert "base_model" not in card.data.to_dict() and str(base) not in card.content
    assert "`LlamaForCausalLM`" in card.content and f"`{sha}`" in card.content
    assert 'base_dir = os.environ["BASE_MODEL_DIR"]' in card.content
    assert '--base "$BASE_MODEL_DIR"' in card.content
