"""Adapters to the Kubernetes API: the node's pods, evictions, node conditions and taints, and events.

Each module wraps one part of the API with the real `kubernetes` client; `client.py` builds the client and
maps its exceptions into `KubeError` in one place.
"""
