"""Adapters: the thin shell between evictd's pure core and the outside world.

Each module here wraps exactly one outside system and nothing else (docs/development.md's "Project layout" lists them).
Invariants shared by every adapter:

* Filesystem readers take a ``root=`` argument (as prometheus_client's ``ProcessCollector(proc=...)``
  does), so tests point them at fixture trees copied from real machines.
* Foreign exceptions never leak: an adapter translates them into the evictd error tree
  (``evictd.core.errors``) in one place. Anything unreadable - a missing file, a permission error,
  garbage content - becomes a ``SampleError`` naming the path; a value is never guessed.
* Adapters return frozen, slotted dataclasses or plain ints with units in their names; bytes are ``int``.
"""
