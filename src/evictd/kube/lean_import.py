"""Importing the few modules evictd uses from the `kubernetes` package without running its package `__init__` files.

evictd needs `kubernetes.client.configuration`, `.rest`, `.exceptions` and `kubernetes.config`'s credential
loaders; imported the ordinary way they load the whole package with the ApiClient and pydantic (~40 MiB).
`import_module(name)` first registers `kubernetes`, `kubernetes.client`, `kubernetes.config` and `kubernetes.utils`
as bare packages (real spec and `__path__`, `__init__.py` not run) whose PEP 562 `__getattr__`/`__dir__` run the real
`__init__.py` into the same module the first time a missing name is asked for: evictd's imports stay lean, a later
`import kubernetes` anywhere gets the full package. Already imported: nothing is deferred. While the loaders import,
`ApiClient` is `ApiClientOnFirstUse` (a real one built if a loader needs it, e.g. an OIDC refresh);
`oauthlib.oauth2` and `requests_oauthlib` (~5 MiB with `requests`) are deferred the same way, with
`OAuth2SessionOnFirstUse`.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

# The packages whose __init__.py is deferred, parents first.
DEFERRED_PACKAGES = ("kubernetes", "kubernetes.client", "kubernetes.config", "kubernetes.utils")
# The modules that import names from `kubernetes.client` at import time.
KUBECONFIG_LOADER = "kubernetes.config.kube_config"
CREDENTIAL_LOADERS = (KUBECONFIG_LOADER, "kubernetes.config.incluster_config")
# What the kubeconfig loader imports for OIDC refreshes alone (~5 MiB with `requests`): deferred likewise.
OIDC_PACKAGES = ("oauthlib.oauth2", "requests_oauthlib")

# Serializes registering the bare packages and running a deferred __init__.py (reentrant: siblings import).
_lock = threading.RLock()
# The bare packages whose __init__.py has not run yet, by name.
_pending: dict[str, ModuleType] = {}
# The bare packages whose __init__.py is running now.
_running: set[str] = set()


class ApiClientOnFirstUse:
    """`kubernetes.client.ApiClient` as the credential loaders see it: calling it builds a real ApiClient."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return importlib.import_module("kubernetes.client.api_client").ApiClient(*args, **kwargs)


class OAuth2SessionOnFirstUse:
    """`requests_oauthlib.OAuth2Session` as the kubeconfig loader sees it: calling it completes `requests_oauthlib`
    and builds a real OAuth2Session."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return importlib.import_module("requests_oauthlib").OAuth2Session(*args, **kwargs)


def _is_installed(package: str) -> bool:
    top = package.partition(".")[0]
    return top in sys.modules or importlib.machinery.PathFinder.find_spec(top) is not None


def import_module(name: str) -> ModuleType:
    """Import the module `name` of the kubernetes package; its packages' `__init__` files run only on demand."""
    with _lock:
        if "kubernetes" not in sys.modules:
            for package in DEFERRED_PACKAGES:
                _register_bare_package(package)
        if name not in CREDENTIAL_LOADERS or name in sys.modules or not is_deferred("kubernetes.client"):
            return importlib.import_module(name)
        client = sys.modules["kubernetes.client"]
        configuration = importlib.import_module("kubernetes.client.configuration").Configuration
        vars(client).update(Configuration=configuration)
        stand_ins = {client: {"ApiClient": ApiClientOnFirstUse}}
        if name == KUBECONFIG_LOADER:
            for package in OIDC_PACKAGES:
                if package not in sys.modules and _is_installed(package):
                    parent = package.rpartition(".")[0]
                    if parent:
                        importlib.import_module(parent)  # `oauthlib` itself is small: imported as usual
                    _register_bare_package(package)
            if is_deferred("requests_oauthlib"):
                stand_ins[sys.modules["requests_oauthlib"]] = {"OAuth2Session": OAuth2SessionOnFirstUse}
        for package_module, names in stand_ins.items():
            vars(package_module).update(names)
        try:
            return importlib.import_module(name)
        finally:
            for package_module, names in stand_ins.items():
                for stand_in in names:
                    del vars(package_module)[stand_in]


def is_deferred(name: str) -> bool:
    """True while `name` is a bare package made here whose `__init__.py` has not run."""
    return name in _pending


def _register_bare_package(name: str) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules[parent_name] if parent_name else None
    spec = importlib.machinery.PathFinder.find_spec(name, None if parent is None else parent.__path__)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    _defer_init(module, spec.loader)
    sys.modules[name] = module
    if parent is not None:
        setattr(parent, child, module)


def _defer_init(module: ModuleType, loader: Any) -> None:
    """Give `module` PEP 562 hooks that run its real `__init__.py` into it at the first missing name."""
    name = module.__name__

    def complete(attribute: str) -> None:
        with _lock:
            if name not in _pending:
                return  # completed meanwhile, by another thread
            if name in _running:
                # Asked from within its own __init__.py (`from . import x` probing): not there yet.
                raise AttributeError(f"partially initialized module {name!r} has no attribute {attribute!r}")
            _running.add(name)
            try:
                loader.exec_module(module)
            except BaseException:
                module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__)  # the next access tries again
                raise
            finally:
                _running.discard(name)
            del _pending[name]
            for hook_name, hook in (("__getattr__", __getattr__), ("__dir__", __dir__)):
                if module.__dict__.get(hook_name) is hook:  # unless the __init__.py defined its own (client does)
                    del module.__dict__[hook_name]

    def __getattr__(attribute: str) -> Any:
        complete(attribute)
        return getattr(module, attribute)

    def __dir__() -> list[str]:
        complete("__dir__")
        return dir(module)

    module.__dict__.update(__getattr__=__getattr__, __dir__=__dir__)
    _pending[name] = module
