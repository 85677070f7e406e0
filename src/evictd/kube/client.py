"""Building the real `kubernetes` client, and the one place its exceptions become `KubeError`.

Credentials come from a kubeconfig file or, when none is configured, from the in-cluster service account.
Every call goes through `call()`, which applies a per-request timeout and maps `ApiException` (HTTP status
and the API's Status message), urllib3 connection errors and timeouts into `KubeError(verb, status, detail)`
with `status` None when the server never answered. Nothing else in evictd catches client exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from evictd.core.errors import ConfigError, KubeError

_T = TypeVar("_T")

# Statuses after which the same request may succeed later: throttling, server errors, no answer.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


def is_retryable(error: KubeError) -> bool:
    """True when the API may accept the same request later (no answer, throttled, or a server error)."""
    return error.status is None or error.status in RETRYABLE_STATUSES


def build_api_client(kubeconfig: str = "") -> Any:
    """Return a kubernetes ApiClient from `kubeconfig`, or from the in-cluster service account when empty.

    urllib3's own retries are turned off: evictd decides what to retry (its journal replays every cycle).
    Raises ConfigError when the credentials cannot be loaded.
    """
    from kubernetes import client, config

    try:
        configuration = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except Exception as exc:  # the loaders raise assorted types for unreadable or missing credentials
        key = "kubeconfig" if kubeconfig else "in-cluster credentials"
        raise ConfigError(f"cannot load Kubernetes credentials: {exc}", key=key, value=kubeconfig or None) from None
    configuration.retries = False
    return client.ApiClient(configuration)


def _detail(exc: Any) -> str:
    """Return the API's Status message of an ApiException, or its reason."""
    body = getattr(exc, "body", None)
    if body:
        try:
            status = json.loads(body)
            if isinstance(status, dict) and status.get("message"):
                return str(status["message"])
        except (TypeError, ValueError):
            pass
    return str(getattr(exc, "reason", "") or exc)


def call(verb: str, function: Callable[..., _T], *args: Any, timeout_s: float = 10.0, **kwargs: Any) -> _T:
    """Call one client method with a timeout; raise KubeError(verb, status, detail) on any failure."""
    from kubernetes.client.exceptions import ApiException

    try:
        return function(*args, _request_timeout=timeout_s, **kwargs)
    except ApiException as exc:
        status = exc.status if isinstance(exc.status, int) and exc.status > 0 else None
        raise KubeError(verb, status, _detail(exc)) from None
    except Exception as exc:  # urllib3/ssl/socket errors: the server never answered
        raise KubeError(verb, None, f"{type(exc).__name__}: {exc}") from None
