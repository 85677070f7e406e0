"""Adapters: the thin shell between evictd's pure core and the outside world.

Each module here wraps exactly one outside system and nothing else, for example:

* ``cgroups`` - the cgroup filesystem (v1 and v2; cgroupfs and systemd drivers): memory readings,
  process counts, and discovery of pod and container cgroups;
* ``procfs`` - ``/proc``: machine memory capacity, the task limit and the number of running tasks;
* ``filesystems`` - ``statfs(2)``/``stat(2)`` for filesystem capacity; ``disk_usage`` - directory trees
  measured for pod volumes and logs.

Invariants shared by every adapter:

* Filesystem readers take a ``root=`` argument (as prometheus_client's ``ProcessCollector(proc=...)``
  does), so tests point them at fixture trees copied from real machines.
* Foreign exceptions never leak: an adapter translates them into the evictd error tree
  (``evictd.core.errors``) in one place. Anything unreadable - a missing file, a permission error,
  garbage content - becomes a ``SampleError`` naming the path; a value is never guessed.
* Adapters return frozen, slotted dataclasses or plain ints with units in their names; bytes are ``int``.
"""
