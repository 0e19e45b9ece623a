"""Fail at once, in one line, when a Hub id is named and the Hub cannot answer (issue 30).

huggingface_hub retries a failed connection five times with backoff (six lines of "Retrying in 8s" and ~40 s)
before transformers reports that it "couldn't connect". :func:`require_hub` answers first, without a request to
the Hub: a file of the repo already in the local Hub cache is enough (transformers and huggingface_hub read it
there); otherwise ``HF_HUB_OFFLINE`` set is refused in one line, and so is a Hub endpoint (or the proxy that
reaches it) that refuses a TCP connection or whose name does not resolve, within :data:`PROBE_SECONDS`.
"""

from __future__ import annotations

import socket
import urllib.request
from urllib.parse import urlsplit

from ..errors import InputError, MathNeuroEditError
from .scrub import redact_url_credentials

__all__ = ["require_hub", "PROBE_SECONDS"]

PROBE_SECONDS = 5.0  # one TCP connect to the endpoint (or its proxy); a name that does not resolve fails at once


def _cached(repo_id: str, filename: str | None, revision: str | None) -> bool:
    from huggingface_hub import try_to_load_from_cache

    if filename is None:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, filename, revision=revision), str)
    except Exception:  # noqa: BLE001 - an odd cache is "not cached": the download path reports its own errors
        return False


def _probe_target(endpoint: str) -> tuple[str, int, str]:
    """``(host, port, what)`` the first connection goes to: the endpoint, or the proxy the environment names."""
    url = urlsplit(endpoint)
    scheme = url.scheme or "https"
    host = url.hostname or "huggingface.co"
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            return p.hostname, p.port or (443 if p.scheme == "https" else 80), f"the proxy {p.hostname}"
    return host, url.port or (443 if scheme == "https" else 80), host


def require_hub(repo_id: str, *, what: str, filename: str | None = "config.json", revision: str | None = None) -> None:
    """Raise one line now when ``repo_id`` would have to be fetched and the Hub cannot be reached. ``what`` names
    it in the message (``"base.model"``); a cached copy of ``filename`` means no request is needed (``None``:
    always probe).

    Raises:
        InputError: ``HF_HUB_OFFLINE`` is set and the file is not in the local Hub cache.
        MathNeuroEditError: the endpoint (or its proxy) does not resolve or refuses a connection within
            :data:`PROBE_SECONDS` (a failure of the environment: exit 3).
    """
    from huggingface_hub import constants

    if _cached(repo_id, filename, revision):
        return
    if constants.HF_HUB_OFFLINE:
        raise InputError(
            f"{what} {repo_id!r}: HF_HUB_OFFLINE is set and {repo_id} is not in the local Hugging Face "
            f"Hub cache ({constants.HF_HUB_CACHE}); unset HF_HUB_OFFLINE to download it, or pass a "
            "local folder"
        )
    host, port, label = _probe_target(constants.ENDPOINT)
    try:
        socket.create_connection((host, port), timeout=PROBE_SECONDS).close()
    except OSError as e:
        why = " ".join((e.strerror or str(e) or type(e).__name__).split())[:120]
        raise MathNeuroEditError(
            f"{what} {repo_id!r}: cannot reach the Hugging Face Hub at {redact_url_credentials(constants.ENDPOINT)} "
            f"({label}:{port}: {why}) and {repo_id} is not in the local Hub cache; check the "
            "network (or set HF_HUB_OFFLINE=1 to use the cache only), or pass a local folder"
        ) from None
