"""Adapters: the thin shell between evictd's pure core and the outside world, one outside system per module.

Shared invariants: filesystem readers take a ``root=`` so tests use fixture trees; foreign exceptions are mapped into
``evictd.core.errors`` in one place (anything unreadable is a ``SampleError`` naming the path, never a guess); values
are frozen dataclasses or ints with units in their names.
"""
