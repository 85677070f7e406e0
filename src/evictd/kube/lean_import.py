"""Importing the few modules evictd uses from the `kubernetes` package without running its package `__init__` files.

evictd needs `kubernetes.client.configuration`, `.rest` and `.exceptions`, and `kubernetes.config`'s credential
loaders. Imported the ordinary way they run `kubernetes/__init__.py` (client, config, dynamic, watch, stream,
utils, leaderelection, informer) and, through the loaders' `from kubernetes.client import ApiClient`, the
ApiClient with pydantic and its models: about 40 MiB, in a daemon that must stay under 64.

`import_module(name)` therefore first registers the packages `kubernetes`, `kubernetes.client`,
`kubernetes.config` and `kubernetes.utils` as bare package modules: the real spec, file and `__path__`, so their
submodules import as usual, but `__init__.py` not run yet. Each carries a module `__getattr__` and `__dir__`
(PEP 562): the first time anything asks it for a name it does not have, the real `__init__.py` runs into that
very module, which from then on is the ordinary, complete package. Importing a submodule never asks for a missing
name, so evictd's imports stay lean, while a later `import kubernetes` or `from kubernetes import client;
client.CoreV1Api` anywhere in the process gets the full package. When `kubernetes` was imported before, nothing
is deferred: the modules are imported as usual.

The credential loaders import `ApiClient` and `Configuration` from `kubernetes.client` at import time.
`Configuration` is the real class. `ApiClient` is offered only while they are being imported, as
`ApiClientOnFirstUse`, which builds a real ApiClient if a loader ever needs one (an OIDC token refresh); once they
are imported, `kubernetes.client.ApiClient` is missing again, so asking for it completes the package.

The kubeconfig loader also imports, for OIDC token refreshes only, `oauthlib.oauth2` and `requests_oauthlib`
(which imports `requests`): about 5 MiB more. Both are registered as bare packages in the same way (unless already
imported), and while the loader is imported `requests_oauthlib` offers `OAuth2SessionOnFirstUse`, which completes
it and builds a real OAuth2Session when a refresh needs one; `oauthlib.oauth2`, named only in the refresh's
`except` clause, completes when that clause is reached.
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
# What the kubeconfig loader imports for OIDC token refreshes alone (`import oauthlib.oauth2`, `from
# requests_oauthlib import OAuth2Session`): with `requests` about 5 MiB, deferred like the packages above until
# a refresh uses them.
OIDC_PACKAGES = ("oauthlib.oauth2", "requests_oauthlib")

# Serializes registering the bare packages and running a deferred __init__.py (reentrant: an __init__.py
# imports its siblings).
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
    """`requests_oauthlib.OAuth2Session` as the kubeconfig loader sees it: calling it (an OIDC token refresh)
    completes `requests_oauthlib`, with `requests`, and builds a real OAuth2Session.
    """

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
                # Asked from within its own __init__.py (e.g. `from . import x` probing for x): as for any
                # partially initialized module, the name is simply not there yet.
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
