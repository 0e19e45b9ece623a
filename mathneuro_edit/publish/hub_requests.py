"""The Hub request layer of a push: a timeout on every request, retries of the Hub's "later" answers, and one
line for every failure (the token never in it).

huggingface_hub's own client has no timeout, so a Hub that never answers would hang ``push`` forever; a 429 or a
5xx is worth trying again; and its exceptions (an LFS upload's failure wrapped in a ``RuntimeError``, the server's
message, a credential it may echo) are worded through :data:`_ERROR_TABLE` into one line that says what to do.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager, suppress
from typing import Any

from huggingface_hub import constants
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import get_session

from ..errors import InputError, MathNeuroEditError
from ..util.scrub import redact_url_credentials, scrub_token

__all__ = [
    "TIMEOUT_ENV",
    "DEFAULT_TIMEOUT_S",
    "RETRIES",
    "RETRY_STATUSES",
    "hub_timeout",
    "request_timeouts",
    "retrying",
    "hub_errors",
    "interruptible",
    "requests_left_running",
    "progress_bars_on_a_terminal_only",
    "hub_fault",
    "first_line",
]


def _client_errors(name: str, *builtin: type[BaseException]) -> tuple[type[BaseException], ...]:
    """``builtin`` plus the exception class ``name`` of each HTTP client huggingface_hub may use (httpx2 in 2.x,
    httpx in 1.x) that is installed: ``TransportError`` (network-level) or ``TimeoutException``."""
    found = list(builtin)
    for module in ("httpx2", "httpx"):
        with suppress(ImportError, AttributeError):
            found.append(getattr(importlib.import_module(module), name))
    return tuple(found)


TIMEOUT_ENV = "MATHNEURO_EDIT_HUB_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0  # per request: connect, each read and write; an LFS upload streams, so only stalls count
RETRIES = 4  # after the first try: waits of 1, 2, 4, 8 s (or what Retry-After asks, at most MAX_WAIT_S)
MAX_WAIT_S = 60.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_sleep: Callable[[float], None] = time.sleep  # module attribute: tests record the waits instead of sleeping


def hub_timeout() -> float:
    """Seconds each Hub request may take (``MATHNEURO_EDIT_HUB_TIMEOUT``, default 60)."""
    raw = os.environ.get(TIMEOUT_ENV, "")
    try:
        value = float(raw) if raw.strip() else DEFAULT_TIMEOUT_S
    except ValueError:
        raise InputError(f"{TIMEOUT_ENV}={raw!r}: not a number of seconds; unset it or give e.g. 120") from None
    if not (value > 0 and math.isfinite(value)):  # 0 would fail every request at once, inf wait forever
        raise InputError(f"{TIMEOUT_ENV}={raw!r}: must be a positive, finite number of seconds, e.g. 120")
    return value


@contextmanager
def request_timeouts(seconds: float) -> Iterator[None]:
    """huggingface_hub's shared HTTP client with a timeout on every request, for the duration of a push (its
    own timeout again afterwards)."""
    session = get_session()
    before = session.timeout
    session.timeout = seconds  # httpx: connect, read, write and pool timeouts alike
    try:
        yield
    finally:
        session.timeout = before


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    value = next((str(v).strip() for k, v in dict(headers).items() if k.lower() == "retry-after"), "")
    return float(value) if value.isdigit() else None


def _chain(exc: BaseException, implicit: bool = True) -> list[BaseException]:
    """``exc`` and what it was raised from (``implicit``: or while handling), each once."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and all(seen is not c for c in chain):
        chain.append(seen)
        seen = seen.__cause__ or (seen.__context__ if implicit else None)
    return chain


def _http_error(exc: BaseException) -> HfHubHTTPError | None:
    """The Hub's HTTP error behind ``exc``: itself, or the cause huggingface_hub wraps an LFS upload's failure in
    (``RuntimeError: Error while uploading ...``)."""
    return next((e for e in _chain(exc, implicit=False) if isinstance(e, HfHubHTTPError)), None)


def first_line(text: object, default: str = "", limit: int = 300) -> str:
    """The first line of ``text`` (an exception's message, the Hub's answer), at most ``limit`` characters."""
    return (str(text or "").strip().splitlines() or [default])[0][:limit]


def retrying(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, tried again after a 429 or a 5xx (at most :data:`RETRIES` more times); the last
    failure is raised as it came (:func:`hub_errors` words it). Timeouts and dropped connections are not tried again
    here: the client's own backoff already retries its idempotent requests, and a Hub that never answers must
    end the push in minutes, not hours."""
    for attempt in range(RETRIES):
        try:
            return call(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - only the Hub's "later" answers are retried; the rest re-raised
            http = _http_error(e)
            if getattr(getattr(http, "response", None), "status_code", None) not in RETRY_STATUSES:
                raise
            wait = _retry_after(http)
        _sleep(min(MAX_WAIT_S, wait if wait is not None else 2.0**attempt))
    return call(*args, **kwargs)  # the last try: its failure is raised as it came


_LEFT_RUNNING: list[futures.Future[Any]] = []  # the calls an interrupt stopped waiting for


def interruptible(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` in a daemon thread, waited for from the calling (main) thread in short waits.

    Why: huggingface_hub uploads several LFS files from worker threads; a main thread blocked on them cannot run
    a signal handler until a stalled upload times out (a SIGTERM then took 65 s). Here Ctrl-C or SIGTERM ends
    the wait at once; the abandoned call is recorded (:func:`requests_left_running`) so that the CLI exits
    without waiting for it. Nothing is committed by an abandoned push: the Hub's commit is one request, last.
    (A ``Future`` waited on, not ``Thread.join``: a join interrupted by a signal marks the live thread as stopped.)
    """
    if threading.current_thread() is not threading.main_thread():  # signals reach only the main thread
        return call(*args, **kwargs)
    future: futures.Future[Any] = futures.Future()

    def target() -> None:
        try:
            future.set_result(call(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting thread as it came
            future.set_exception(e)

    threading.Thread(target=target, name="mathneuro-edit-hub", daemon=True).start()
    try:
        while not futures.wait([future], timeout=0.1).done:  # a timed wait is interrupted by a signal's handler
            pass
    except BaseException:
        _LEFT_RUNNING.append(future)
        raise
    return future.result()


def requests_left_running() -> bool:
    """Whether an interrupted push left a Hub request running in a thread (the process should not wait for it)."""
    return any(not future.done() for future in _LEFT_RUNNING)


@contextmanager
def progress_bars_on_a_terminal_only() -> Iterator[None]:
    """huggingface_hub's upload bars only when stderr is a terminal (restored after): in a log, every retry of a
    failing upload added bar lines (445 of them) and the error was not the last line."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    if sys.stderr.isatty() or are_progress_bars_disabled():
        yield
        return
    disable_progress_bars()
    try:
        yield
    finally:
        enable_progress_bars()


# (exception type, HTTP status or None for any, our error type, message). First match wins, so order matters:
# specific types before HfHubHTTPError, specific statuses before the catch-all. Placeholders: {repo_id},
# {revision}, {status}, {detail} (the Hub's first line, token removed), {endpoint}, {timeout}, {tries}.
_TIMEOUTS = _client_errors("TimeoutException", TimeoutError)
_NETWORK = _client_errors("TransportError", ConnectionError, TimeoutError)
# fmt: off
_ERROR_TABLE: list[tuple[tuple[type[BaseException], ...], int | None, type[MathNeuroEditError], str]] = [
    ((OfflineModeIsEnabled,), None, InputError, "HF_HUB_OFFLINE is set, so nothing can be pushed; unset it and retry"),
    ((RevisionNotFoundError,), None, InputError,
     "{repo_id}: revision {revision!r} not found ({detail}); push to a branch name, which is created if missing"),
    ((RepositoryNotFoundError,), None, InputError,
     "{repo_id}: repository not found or not accessible with this token ({detail}); check the repo id and that "
     "the token can write to its namespace"),
    ((HfHubHTTPError,), 401, InputError,
     "the Hub rejected the token (401 Unauthorized); log in again with `hf auth login` or set a valid HF_TOKEN"),
    ((HfHubHTTPError,), 403, InputError,
     "the token may not write to {repo_id} (403 Forbidden: {detail}); use a token with write access to that "
     "namespace"),
    ((HfHubHTTPError,), 404, InputError,
     "{repo_id}: not found on the Hub (404: {detail}); check the repo id and revision"),
    ((HfHubHTTPError,), 409, MathNeuroEditError,
     "{repo_id}: the Hub reported a conflict (409: {detail}); retry, or push to another revision"),
    ((HfHubHTTPError,), 429, MathNeuroEditError,
     "the Hub is rate-limiting requests (429, still after {tries} tries); wait a few minutes and retry"),
    ((HfHubHTTPError,), None, MathNeuroEditError,
     "the Hub answered {status} for {repo_id} ({detail}; {tries} tries); retry later"),
    (_TIMEOUTS, None, MathNeuroEditError,
     "the Hub at {endpoint} did not answer within {timeout:g} s ({detail}); check the network, or raise "
     f"{TIMEOUT_ENV}"),
    (_NETWORK, None, MathNeuroEditError, "cannot reach the Hub at {endpoint} ({detail}); check the network"),
    ((ValueError,), None, InputError, "the Hub client refused the upload of {repo_id}: {detail}"),
]
# fmt: on


def hub_fault(repo_id: str, exc: BaseException, doing: str, token: str | None = None) -> MathNeuroEditError | None:
    """A failed read from the Hub (``hf_hub_download``, ``model_info``) as one exit-3 line when it is the Hub's or
    the network's fault, else ``None`` (the caller's own exit-2 line: not found, no access, offline mode).

    The Hub's fault: a 5xx or 429 answer (huggingface_hub wraps it in ``LocalEntryNotFoundError``, which reads
    "offline?"), no connection or a timeout, or an answer it cannot read (a redirect without a ``Location``
    header: a ``KeyError``; a file answer without its metadata).
    """
    from huggingface_hub.errors import FileMetadataError

    chain = _chain(exc)
    if any(isinstance(e, OfflineModeIsEnabled) for e in chain):
        return None

    def said(e: BaseException) -> str:
        first = first_line(e, limit=200)
        return scrub_token(f"{type(e).__name__}: {first}" if first else type(e).__name__, token)

    for e in chain:
        status = getattr(getattr(e, "response", None), "status_code", None)
        if isinstance(e, HfHubHTTPError) and isinstance(status, int) and (status >= 500 or status == 429):
            return MathNeuroEditError(f"{repo_id}: the Hub answered {status} while {doing} ({said(e)}); retry later")
    for e in chain:
        if isinstance(e, _NETWORK):
            return MathNeuroEditError(
                # HF_ENDPOINT may hold user:password@ (hub_errors' lines go through scrub_token, which redacts it)
                f"{repo_id}: cannot reach the Hub at {redact_url_credentials(constants.ENDPOINT)} while {doing} "
                f"({said(e)}); check the network and retry"
            )
    for e in chain:
        if isinstance(e, (KeyError, FileMetadataError)) or (
            isinstance(e, ValueError) and not isinstance(e, HfHubHTTPError) and "json" in type(e).__name__.lower()
        ):
            return MathNeuroEditError(
                f"{repo_id}: the Hub's answer while {doing} could not be read ({said(e)}); "
                "retry later, or check HF_ENDPOINT and any proxy"
            )
    return None


@contextmanager
def hub_errors(repo_id: str, revision: str, token: str) -> Iterator[None]:
    """Translate huggingface_hub / network exceptions through :data:`_ERROR_TABLE` (token scrubbed)."""
    try:
        yield
    except MathNeuroEditError:
        raise
    except Exception as caught:  # matched against the table below; anything unknown is re-raised unchanged
        e = _http_error(caught) or caught  # an LFS upload's failure comes wrapped in a RuntimeError
        status = getattr(getattr(e, "response", None), "status_code", None)
        detail = first_line(e, type(e).__name__)
        server = first_line(getattr(e, "server_message", None))
        if server and server not in detail:  # the Hub's own words: often the fix (may echo a credential)
            detail = f"{detail}: {server}"
        detail = scrub_token(detail, token)
        for types, wanted, error, message in _ERROR_TABLE:
            if isinstance(e, types) and wanted in (None, status):
                text = message.format(
                    repo_id=repo_id,
                    revision=revision,
                    status=status,
                    detail=detail,
                    endpoint=constants.ENDPOINT,
                    timeout=hub_timeout(),
                    tries=RETRIES + 1,
                )
                raise error(scrub_token(text, token)) from None
        fault = hub_fault(repo_id, caught, "pushing", token)  # an answer it cannot read (a bare redirect): exit 3
        if fault is not None:
            raise fault from None
        raise
