"""A local fake Hugging Face Hub that keeps repo state, for the REAL huggingface_hub client (and transformers, PEFT).

It speaks the endpoints huggingface_hub 2.x calls with Xet disabled: repo creation, info (``model_info``, with
``files_metadata=True``: size, blob id and LFS sha256), settings (visibility), branches, README metadata validation,
preupload (regular vs LFS), the LFS batch API with a PUT upload, the ndjson commit (adds, LFS adds, deletes;
``create_pr`` opens ``refs/pr/N``), the tree listing and file downloads (``HEAD``/``GET`` ``/resolve/``: ETag,
X-Repo-Commit, X-Linked-Etag/Size for LFS files), so ``snapshot_download``, ``hf_hub_download`` and
``from_pretrained(repo_id)`` work against it. Every request is recorded, so tests check what was sent.

Use the ``fake_hub`` fixture (import it into a test module): it points huggingface_hub at the server, keeps its
cache in the test's tmp folder and clears every token source.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
import torch
from huggingface_hub import constants, hf_api
from safetensors.torch import save_file
from transformers.utils import hub as transformers_hub

from mathneuro_edit.publish.card import CardSource, build_card, summarize_edit, write_card
from mathneuro_edit.publish.lock import build_lock, output_hashes, write_lock
from mathneuro_edit.recipe.io import quickstart_recipe

TOKEN = "hf_TESTsecretTOKEN0123456789abcdef"
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth")
GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.gguf filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class FakeRepo:
    private: bool
    refs: dict[str, dict[str, bytes]] = field(default_factory=dict)  # branch / refs/pr/N -> {path: content}
    lfs_paths: set[str] = field(default_factory=set)  # paths committed as LFS files
    heads: dict[str, str] = field(default_factory=dict)  # ref -> commit oid
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # oid -> files at that commit
    prs: int = 0

    def files(self, revision: str) -> dict[str, bytes] | None:
        if revision in self.refs:
            return self.refs[revision]
        return self.commits.get(revision)

    def head(self, revision: str) -> str:
        return self.heads.get(revision, revision)


class FakeHub:
    """Recorded requests + server-side state; ``fail`` makes the server refuse paths with a given status."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.lfs: dict[str, bytes] = {}
        self.commits: list[list[dict]] = []  # every commit's ndjson lines, in order
        self.repos: dict[str, FakeRepo] = {}
        self.fail: dict[str, tuple[int, str | None]] = {}  # path prefix -> (status, X-Error-Code)
        self.fail_message: str | None = None  # body "error" of a refused request (default: "refused with N")
        # path prefix -> answers served once each, in order, before the path works again: (status, headers)
        self.fail_times: dict[str, list[tuple[int, dict[str, str]]]] = {}
        self.delay: dict[str, float] = {}  # path prefix -> seconds to wait before answering (a Hub that stalls)
        self.url = ""
        self._lock = threading.Lock()
        self._n = 0

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """The repo's files at a revision (what a download would give)."""
        return dict(self.repos[repo_id].refs[revision])

    def _commit(self, repo: FakeRepo, ref: str, files: dict[str, bytes]) -> str:
        self._n += 1
        oid = hashlib.sha1(f"{self._n}".encode() + json.dumps(sorted(files)).encode()).hexdigest()
        repo.refs[ref] = files
        repo.heads[ref] = oid
        repo.commits[oid] = dict(files)
        return oid

    def create(self, repo_id: str, private: bool = False) -> FakeRepo:
        repo = self.repos[repo_id] = FakeRepo(private=private)
        self._commit(repo, "main", {".gitattributes": GITATTRIBUTES})
        return repo


def _split_repo(rest: str) -> tuple[str, str]:
    """``ns/name/tail...`` -> (``ns/name``, ``tail...``)."""
    parts = rest.split("/", 2)
    return "/".join(parts[:2]), (parts[2] if len(parts) > 2 else "")


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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

        def _send(
            self, status: int, payload: object, error_code: str | None = None, headers: dict[str, str] | None = None
        ) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            if error_code:
                self.send_header("X-Error-Code", error_code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if not isinstance(payload, bytes):
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _route(self) -> None:
            body = self._body()
            headers = {k.lower(): v for k, v in self.headers.items()}
            hub.requests.append({"method": self.command, "path": self.path, "headers": headers, "body": body})
            url = urlsplit(self.path)
            path, query = url.path, parse_qs(url.query)
            for prefix, (status, code) in hub.fail.items():
                if path.startswith(prefix):
                    return self._send(status, {"error": hub.fail_message or f"refused with {status}"}, code)
            for prefix, seconds in hub.delay.items():
                if path.startswith(prefix):
                    threading.Event().wait(seconds)  # not time.sleep: tests may replace the client's sleep
            for prefix, answers in hub.fail_times.items():
                if path.startswith(prefix) and answers:
                    status, extra = answers.pop(0)
                    return self._send(status, {"error": f"refused with {status}"}, headers=extra)
            with hub._lock:
                return self._dispatch(path, query, body)

        def _dispatch(self, path: str, query: dict, body: bytes) -> None:
            if path == "/api/repos/create":
                req = json.loads(body)
                repo_id = f"{req['organization']}/{req['name']}"
                if repo_id in hub.repos:
                    return self._send(409, {"error": "You already created this model repo", "url": ""})
                hub.create(repo_id, private=req.get("visibility") == "private" or bool(req.get("private")))
                return self._send(200, {"url": f"{hub.url}/{repo_id}"})
            if path == "/api/validate-yaml":
                return self._send(200, {"errors": [], "warnings": []})
            if path.startswith("/lfs-upload/"):
                hub.lfs[path.rsplit("/", 1)[1]] = body
                return self._send(200, {})
            if path.startswith("/api/models/"):
                return self._api(*_split_repo(path[len("/api/models/") :]), query, body)
            if "/resolve/" in path:
                repo_id, tail = _split_repo(path.lstrip("/"))
                return self._resolve(repo_id, tail.removeprefix("resolve/"))
            if path.endswith(".git/info/lfs/objects/batch"):
                objects = json.loads(body)["objects"]
                return self._send(
                    200,
                    {
                        "transfer": "basic",
                        "objects": [
                            {
                                "oid": o["oid"],
                                "size": o["size"],
                                "actions": {"upload": {"href": f"{hub.url}/lfs-upload/{o['oid']}"}},
                            }
                            for o in objects
                        ],
                    },
                )
            return self._send(404, {"error": "not found"})

        def _repo(self, repo_id: str) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._send(404, {"error": "Repository not found"}, "RepoNotFound")
            return repo

        def _api(self, repo_id: str, tail: str, query: dict, body: bytes) -> None:
            repo = self._repo(repo_id)
            if repo is None:
                return None
            action, _, rest = tail.partition("/")
            if action in ("", "revision"):
                revision = unquote(rest) if action else "main"
                files = repo.files(revision)
                if files is None:
                    return self._send(404, {"error": f"Invalid rev id: {revision}"}, "RevisionNotFound")
                siblings = []
                for p, c in sorted(files.items()):
                    entry: dict = {"rfilename": p}
                    if query.get("blobs"):
                        entry.update(size=len(c), blobId=git_blob_sha1(c))
                        if p in repo.lfs_paths:
                            entry["lfs"] = {"sha256": hashlib.sha256(c).hexdigest(), "size": len(c), "pointerSize": 134}
                    siblings.append(entry)
                return self._send(
                    200,
                    {
                        "id": repo_id,
                        "modelId": repo_id,
                        "sha": repo.head(revision),
                        "private": repo.private,
                        "siblings": siblings,
                        "tags": [],
                    },
                )
            if action == "settings":
                req = json.loads(body)
                if "visibility" in req:
                    repo.private = req["visibility"] == "private"
                elif "private" in req:
                    repo.private = bool(req["private"])
                return self._send(200, {})
            if action == "branch":
                name = unquote(rest)
                if name not in repo.refs:
                    repo.refs[name] = dict(repo.refs["main"])
                    repo.heads[name] = repo.heads["main"]
                return self._send(200, {})
            if action == "preupload":
                files = json.loads(body)["files"]
                return self._send(
                    200,
                    {
                        "files": [
                            {
                                "path": f["path"],
                                "shouldIgnore": False,
                                "uploadMode": "lfs" if f["path"].endswith(LFS_SUFFIXES) else "regular",
                            }
                            for f in files
                        ]
                    },
                )
            if action == "commit":
                return self._commit(repo_id, repo, unquote(rest), query, body)
            if action == "tree":
                revision, _, sub = rest.partition("/")
                files = repo.files(unquote(revision))
                if files is None:
                    return self._send(404, {"error": "Invalid rev id"}, "RevisionNotFound")
                sub = unquote(sub).strip("/")
                entries = [
                    {"type": "file", "path": p, "size": len(c), "oid": git_blob_sha1(c)}
                    for p, c in sorted(files.items())
                    if not sub or p.startswith(sub + "/")
                ]
                if sub and not entries:
                    return self._send(404, {"error": "Entry not found"}, "EntryNotFound")
                return self._send(200, entries)
            return self._send(404, {"error": "not found"})

        def _commit(self, repo_id: str, repo: FakeRepo, revision: str, query: dict, body: bytes) -> None:
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            hub.commits.append(lines)
            base = repo.files(revision)
            if base is None:
                return self._send(404, {"error": f"Invalid rev id: {revision}"}, "RevisionNotFound")
            files = dict(base)
            for line in lines[1:]:
                key, value = line["key"], line["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                    repo.lfs_paths.discard(value["path"])
                elif key == "lfsFile":
                    files[value["path"]] = hub.lfs[value["oid"]]
                    repo.lfs_paths.add(value["path"])
                elif key == "deletedFile":
                    if value["path"] not in files:
                        return self._send(404, {"error": "A file with this name doesn't exist"}, "EntryNotFound")
                    del files[value["path"]]
                elif key == "deletedFolder":
                    for p in [p for p in files if p.startswith(value["path"].rstrip("/") + "/")]:
                        del files[p]
            payload: dict = {}
            ref = revision
            if query.get("create_pr"):
                repo.prs += 1
                ref = f"refs/pr/{repo.prs}"
                payload["pullRequestUrl"] = f"{hub.url}/{repo_id}/discussions/{repo.prs}"
            oid = hub._commit(repo, ref, files)
            payload.update(commitUrl=f"{hub.url}/{repo_id}/commit/{oid}", commitOid=oid)
            return self._send(200, payload)

        def _resolve(self, repo_id: str, tail: str) -> None:
            repo = self._repo(repo_id)
            if repo is None:
                return None
            revision, _, filename = tail.partition("/")
            revision = unquote(revision)
            if revision.startswith("refs/pr/") or revision == "refs":  # refs%2Fpr%2F1 is unquoted already
                pass
            files = repo.files(revision)
            if files is None:
                return self._send(404, {"error": "Invalid rev id"}, "RevisionNotFound")
            filename = unquote(filename)
            if filename not in files:
                return self._send(
                    404, {"error": "Entry not found"}, "EntryNotFound", {"X-Repo-Commit": repo.head(revision)}
                )
            content = files[filename]
            extra = {"X-Repo-Commit": repo.head(revision), "ETag": f'"{git_blob_sha1(content)}"'}
            if filename in repo.lfs_paths:
                extra.update(
                    {"X-Linked-Etag": f'"{hashlib.sha256(content).hexdigest()}"', "X-Linked-Size": str(len(content))}
                )
            return self._send(200, content, headers=extra)

        do_GET = do_POST = do_PUT = do_HEAD = _route

    return Handler


class _QuietServer(ThreadingHTTPServer):
    """A client that hangs up mid-answer (a test that has what it needs, a timeout test) is not an error: the default
    handler prints a traceback to stderr, which lands in whatever output another test is capturing just then."""

    def handle_error(self, request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


@pytest.fixture()
def fake_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    hub = FakeHub()
    server = _QuietServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    # HfApi() reads constants.ENDPOINT when built; hf_hub_url the URL template; Xet off -> plain LFS protocol.
    monkeypatch.setattr(constants, "ENDPOINT", hub.url)
    monkeypatch.setattr(hf_api.api, "endpoint", hub.url)  # the module-level client of file_exists() & co (PEFT)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.url + "/{repo_id}/resolve/{revision}/{filename}")
    # transformers keeps one HfApi of its own (utils.hub.hf_api(), built on first use with the endpoint of that
    # moment): left from an earlier test it asks an old fake Hub, which may answer 404 for this test's repos
    monkeypatch.setattr(transformers_hub, "_hf_api", None)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    # why 120 s: huggingface_hub waits 10 s for a byte of a download; a loaded machine (the suite's two workers
    # beside other jobs) once kept this in-process server from answering a 270 MB model.safetensors that long
    monkeypatch.setattr(constants, "HF_HUB_DOWNLOAD_TIMEOUT", 120)
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "120")  # a subprocess reads it at import
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-stored-token"))
    for var in (
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_OIDC_RESOURCE",
        "NO_PROXY",
        "no_proxy",
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
    ):
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
    lock = build_lock(
        recipe,
        base_revision=None,
        data_records={},
        stats_sha256="s" * 64,
        mask_sha256="d" * 64,
        output_files={f"checkpoint/{k}": v for k, v in output_hashes(out).items()},
        base_weights={},
        edit_summary=summary,
    )  # as a run records them: push checks the folder against them
    write_lock(out, lock)
    card = build_card(
        CardSource(recipe=recipe, lock=lock, edit_summary=summary, license="apache-2.0"),
        "checkpoint",
        base_model_id=None,
    )
    write_card(out, card)
    return out


def relock(out: Path) -> None:
    """Record the folder's files as they are now in its lock (a test that changes a file on purpose before a push)."""
    from mathneuro_edit.publish.integrity import NOT_OUTPUTS
    from mathneuro_edit.publish.lock import read_lock

    lock = read_lock(out)
    lock["outputs"] = {f"checkpoint/{k}": v for k, v in output_hashes(out, skip=NOT_OUTPUTS).items()}
    write_lock(out, lock)


def _committed(hub: FakeHub) -> dict[str, bytes]:
    """Content of every file in the (single) commit, regular files decoded, LFS files from their PUT upload."""
    assert len(hub.commits) == 1
    files = {}
    for line in hub.commits[0][1:]:
        value = line["value"]
        if line["key"] == "file":
            files[value["path"]] = base64.b64decode(value["content"])
        elif line["key"] != "deletedFile":  # a mirror's deletes: tested in test_push_mirrors_the_folder
            assert line["key"] == "lfsFile"
            files[value["path"]] = hub.lfs[value["oid"]]
            assert hashlib.sha256(files[value["path"]]).hexdigest() == value["oid"]
    return files
