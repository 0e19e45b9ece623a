"""Credentials in ``HF_ENDPOINT``'s URL never reach a message (issue 41, class 9).

``HF_ENDPOINT=https://alice:s3cret@hub.example`` (a private mirror behind basic auth, or a proxy URL) was printed as
is in push and reproduce errors ("cannot reach the Hub at https://alice:s3cret@..."), which users paste into issues.
One helper (``util/scrub.py::redact_url_credentials``) replaces every URL's ``user:password@`` and the value of a
query parameter named like a secret with ``***``; the messages that name the endpoint use it, and so does
``scrub_token``, which every CLI error line, report and ``--json`` document goes through (the library's own
exception text quotes the URL too). docs/reliability.md lists what each test promises.
"""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from huggingface_hub import constants, hf_api

from mathneuro_edit.cli.main import main
from mathneuro_edit.errors import MathNeuroEditError
from mathneuro_edit.util import hub_online
from mathneuro_edit.util.scrub import redact_url_credentials, scrub_token
from tests._fakehub import TOKEN, FakeHub

SECRET = "s3cret-pw"


@pytest.mark.parametrize(
    "text,shown",
    [
        ("at https://alice:s3cret-pw@hub.example/api", "at https://***@hub.example/api"),
        ("at http://alice:p@ss:w0rd@127.0.0.1:8080/x y", "at http://***@127.0.0.1:8080/x y"),  # '@' in the password
        ("at https://tok%40en@hub.example", "at https://***@hub.example"),  # a user name alone, percent-encoded
        ("socks5h://u:p@proxy:1080 and https://v:q@hub", "socks5h://***@proxy:1080 and https://***@hub"),
        ("GET https://hub/api?token=hf_abc&revision=main", "GET https://hub/api?token=***&revision=main"),
        ("https://s3/x?X-Amz-Signature=ab12&X-Amz-Credential=AK%2F1;api_key=k", None),
        ("https://huggingface.co/me/model at me@example.com", "https://huggingface.co/me/model at me@example.com"),
        ("https://hub/api/models/me/x?revision=main", "https://hub/api/models/me/x?revision=main"),
    ],
)
def test_the_helper_redacts_userinfo_and_secret_query_values(text: str, shown: str | None) -> None:
    out = redact_url_credentials(text)
    if shown is not None:
        assert out == shown
    else:
        assert "ab12" not in out and "AK%2F1" not in out and "=k" not in out, out
    assert redact_url_credentials(out) == out  # idempotent: a message scrubbed twice reads the same
    assert scrub_token(text) == out  # every scrubbed message redacts URLs too


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def secret_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path) -> str:
    """HF_ENDPOINT with credentials, at a port nothing listens on."""
    url = f"http://alice:{SECRET}@127.0.0.1:{_closed_port()}"
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(hf_api.api, "endpoint", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return url


@pytest.fixture
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.utils._http as client_http

    import mathneuro_edit.publish.hub_requests as hub_module

    monkeypatch.setattr(client_http.time, "sleep", lambda s: None)
    monkeypatch.setattr(hub_module, "_sleep", lambda s: None)


def _assert_redacted(text: str) -> None:
    assert SECRET not in text and "alice" not in text, text
    assert "***@127.0.0.1" in text, text


def test_require_hub_names_the_endpoint_without_its_credentials(secret_endpoint: str) -> None:
    with pytest.raises(MathNeuroEditError, match="cannot reach the Hugging Face Hub") as caught:
        hub_online.require_hub("me/model", what="base.model")
    _assert_redacted(str(caught.value))  # the Python API's message, before any CLI scrubbing


def test_a_download_fault_names_the_endpoint_without_its_credentials(secret_endpoint: str) -> None:
    from mathneuro_edit.publish.hub_requests import hub_fault

    fault = hub_fault("me/edited", ConnectionError("[Errno 111] Connection refused"), "downloading its lock")
    assert fault is not None and "cannot reach the Hub at" in str(fault)
    _assert_redacted(str(fault))  # the Python API's message (reproduce's download of a lock)


def test_reproduce_of_a_hub_repo_at_an_unreachable_endpoint(secret_endpoint: str, no_waits: None) -> None:
    result = CliRunner().invoke(main, ["reproduce", "me/edited"])
    assert result.exit_code in (2, 3), result.output
    assert result.output.strip().splitlines()[-1].startswith("error: ")
    _assert_redacted(result.output)


def test_push_to_an_unreachable_endpoint(
    secret_endpoint: str, no_waits: None, out_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/edited"])
    assert result.exit_code == 3, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith("error: cannot reach the Hub at http://***@127.0.0.1:"), result.output
    _assert_redacted(result.output)
    result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/edited", "--json"])
    assert result.exit_code == 3 and SECRET not in result.output, result.output


def test_a_hub_error_quoting_the_url_shows_it_redacted(
    fake_hub: FakeHub, no_waits: None, out_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hub answers (a 500 on every try): huggingface_hub's error text quotes the request's URL, credentials
    included; the line shows it redacted."""
    url = fake_hub.url.replace("http://", f"http://alice:{SECRET}@")
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(hf_api.api, "endpoint", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    fake_hub.fail_times["/api/models/me/edited"] = [(500, {})] * 50
    result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/edited"])
    assert result.exit_code == 3, result.output
    assert SECRET not in result.output and "alice" not in result.output, result.output


def test_the_library_s_own_retry_lines_show_the_endpoint_redacted(
    fake_hub: FakeHub, no_waits: None, out_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 48: huggingface_hub logs its retries itself ("HTTP Error 500 thrown while requesting GET
    http://alice:s3cret@...") before the tool's redacted error line. Every log record made during a command is
    redacted when it is created, whichever handler prints it (here: one added to huggingface_hub's logger)."""
    import logging

    url = fake_hub.url.replace("http://", f"http://alice:{SECRET}@")
    monkeypatch.setattr(constants, "ENDPOINT", url)
    monkeypatch.setattr(hf_api.api, "endpoint", url)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", url + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    fake_hub.fail_times["/api/models/me/edited/preupload"] = [(500, {})] * 2  # retried by the library itself
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(self.format(record))

    logger, keep = logging.getLogger("huggingface_hub"), Keep()
    logger.addHandler(keep)
    try:
        result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/edited"])
    finally:
        logger.removeHandler(keep)
    assert result.exit_code == 0, result.output
    retries = [line for line in seen if "thrown while requesting" in line]
    assert retries, seen  # the library did log its retries: the check below means something
    assert not any(SECRET in line or "alice" in line for line in seen), retries[:2]
    assert any("http://***@127.0.0.1" in line for line in retries), retries[:2]
