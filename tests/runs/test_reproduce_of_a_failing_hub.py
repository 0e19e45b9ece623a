"""`reproduce user/name` or `push` when the Hub fails: a 5xx answer (huggingface_hub calls it "offline?"), a
redirect without a Location header, or a redirect whose JSON body lacks what huggingface_hub reads (an internal
KeyError once) is the Hub's fault, exit 3 with one line, never exit 2 or a traceback; a repo that is not there stays
the user's to fix (exit 2). docs/reliability.md lists what each test promises."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from tests._fakehub import TOKEN, FakeHub

LOCK_PATH = "/me/edited/resolve/main/mathneuro_recipe.lock.yaml"


@pytest.fixture()
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.utils._http as client_http

    monkeypatch.setattr(client_http.time, "sleep", lambda s: None)  # the client's own backoff between its tries


def _reproduce(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["reproduce", "me/edited", *args])
    return result.exit_code, result.stdout, result.output


@pytest.mark.parametrize("status", [500, 503])
def test_reproduce_of_a_hub_repo_while_the_hub_answers_5xx_is_exit_3_with_one_line(
    fake_hub: FakeHub, no_waits, status: int
) -> None:
    fake_hub.fail_times[LOCK_PATH] = [(status, {})] * 50
    code, _, text = _reproduce()
    assert code == 3, text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        f"error: me/edited: the Hub answered {status} while downloading its mathneuro_recipe.lock.yaml"
    ), text
    assert "retry later" in lines[0] and "offline" not in lines[0] and "internal error" not in lines[0]


def test_reproduce_of_a_hub_repo_answered_by_a_redirect_without_location_is_exit_3(fake_hub: FakeHub, no_waits) -> None:
    fake_hub.fail_times[LOCK_PATH] = [(307, {})] * 50  # a 3xx with a JSON body and no Location header
    code, stdout, text = _reproduce("--json")
    assert code == 3, text
    line = [ln for ln in text.splitlines() if ln.startswith("error: ")]
    assert (
        len(line) == 1
        and "the Hub's answer while downloading its mathneuro_recipe.lock.yaml could not be read" in line[0]
        and "internal error" not in text
    ), text
    import json

    assert json.loads(stdout)["exit_status"] == 3  # --json: the error as JSON on stdout


def test_reproduce_of_a_repo_the_hub_does_not_have_stays_exit_2(fake_hub: FakeHub, no_waits) -> None:
    code, _, text = _reproduce()
    assert code == 2, text
    assert text.strip().splitlines()[-1].startswith("error: me/edited"), text


def test_push_answered_by_a_redirect_without_the_repo_url_is_exit_3_not_a_key_error(
    fake_hub: FakeHub, out_dir, no_waits, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mathneuro_edit.publish.hub_requests as hub_module

    monkeypatch.setattr(hub_module, "_sleep", lambda s: None)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    fake_hub.fail_times["/api/repos/create"] = [(307, {})] * 10  # a 3xx whose JSON body has no "url"
    result = CliRunner().invoke(main, ["push", str(out_dir), "--repo-id", "me/redirected"])
    assert result.exit_code == 3, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "error: me/redirected: the Hub's answer while pushing could not be read (KeyError: 'url')"
    ), lines
    assert fake_hub.commits == []
