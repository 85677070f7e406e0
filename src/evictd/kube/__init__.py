"""Adapters to the Kubernetes API: the node's pods, evictions, node conditions and taints, and events.

Each module wraps one part of the API. `api.py` holds the operations evictd sends, over the `kubernetes`
package's REST client alone, and maps every failure into `KubeError` in one place; `client.py` builds it from
credentials; `lean_import.py` imports those few modules of the package without its heavy `__init__` files.
"""
