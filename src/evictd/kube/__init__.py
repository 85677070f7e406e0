"""Adapters to the Kubernetes API (`api.py`): the node's pods, evictions, node conditions and taints, and events."""
