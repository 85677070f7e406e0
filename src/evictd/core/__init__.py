"""The pure decision core of evictd.

Invariant: modules in this package import only the standard library and `evictd.core` itself. They do no
I/O, read no clock, never log, and never mutate their inputs. Time arrives as an argument (`now`, seconds
on a monotonic clock); results are returned as values with the reasons inside them. `tests/test_layering.py`
enforces the import rule.
"""
