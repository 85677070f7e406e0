"""Summary API documents written back as JSON: whole (`summary_to_dict`), and one after another as what changed.

The inverse of `summary_parser.summary_from_dict`, for the flight recorder and its readers (apart from
`evictd.core.summary` so reading commands do not load it). Invariants: any text written here, whole or rebuilt by
`apply_summary_changes`, decodes to `summary_to_dict` of its Summary, which decodes back to an equal Summary;
`SummaryChangesEncoder` writes changes only against the last committed Summary, and whole after `reset` or while
two pods share an id; changes name pods by id (`summary_pod_id`) with only their changed blocks (`null`: now absent).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from evictd.core.summary import (
    ContainerStats,
    FsStats,
    MemoryStats,
    NodeStats,
    PodReference,
    PodStats,
    Summary,
    VolumeStats,
)

Dumps = Callable[[object], str]


def _time_json(value: datetime | None) -> str | None:
    """RFC 3339 with the time's own offset (to the microsecond), which `_time` reads back to the same instant."""
    return None if value is None else value.isoformat()


def _fields_json(pairs: Sequence[tuple[str, object]]) -> dict[str, object]:
    """Return the pairs whose value is present (None is absent, as the kubelet omits nil pointers)."""
    return {name: value for name, value in pairs if value is not None}


# The counters of a memory block: JSON name, MemoryStats attribute.
_MEMORY_COUNTERS = (("availableBytes", "available_bytes"), ("usageBytes", "usage_bytes"),
                    ("workingSetBytes", "working_set_bytes"), ("rssBytes", "rss_bytes"),
                    ("pageFaults", "page_faults"), ("majorPageFaults", "major_page_faults"))


def _memory_json(memory: MemoryStats | None) -> dict[str, object] | None:
    if memory is None:
        return None
    document: dict[str, object] = {} if memory.time is None else {"time": memory.time.isoformat()}
    for (name, _), value in zip(_MEMORY_COUNTERS, (memory.available_bytes, memory.usage_bytes,
                                                   memory.working_set_bytes, memory.rss_bytes, memory.page_faults,
                                                   memory.major_page_faults), strict=True):
        if value is not None:
            document[name] = value
    if memory.psi is not None:
        document["psi"] = {kind: _fields_json((("total", line.total), ("avg10", line.avg10), ("avg60", line.avg60),
                                               ("avg300", line.avg300), ("evictdRecent", line.recent)))
                           for kind, line in (("some", memory.psi.some), ("full", memory.psi.full))}
    if memory.reclaim is not None:
        document["reclaim"] = _fields_json((("globalScanPages", memory.reclaim.global_scan_pages),
                                            ("limitEvents", memory.reclaim.limit_events),
                                            ("refaultFileBytes", memory.reclaim.refault_file_bytes),
                                            ("activateFileBytes", memory.reclaim.activate_file_bytes),
                                            ("protectedBytes", memory.reclaim.protected_bytes),
                                            ("lowEvents", memory.reclaim.low_events),
                                            ("reclaimedBytes", memory.reclaim.reclaimed_bytes),
                                            ("fileBytes", memory.reclaim.file_bytes),
                                            ("nodeAvailableBytes", memory.reclaim.node_available_bytes)))
    return document


def _fs_json(fs: FsStats | VolumeStats | None) -> dict[str, object] | None:
    if fs is None:
        return None
    return _fields_json((("time", _time_json(fs.time)), ("availableBytes", fs.available_bytes),
                         ("capacityBytes", fs.capacity_bytes), ("usedBytes", fs.used_bytes),
                         ("inodesFree", fs.inodes_free), ("inodes", fs.inodes), ("inodesUsed", fs.inodes_used)))


def _container_json(stats: ContainerStats) -> dict[str, object]:
    return _fields_json((("name", stats.name), ("memory", _memory_json(stats.memory)),
                         ("rootfs", _fs_json(stats.rootfs)), ("logs", _fs_json(stats.logs))))


def _volumes_json(volumes: Sequence[VolumeStats]) -> list[dict[str, object]]:
    return [{"name": volume.name, **(_fs_json(volume) or {})} for volume in volumes]


def _pod_ref_json(ref: PodReference) -> dict[str, object]:
    return {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid}


def _pod_stats_json(stats: PodStats) -> dict[str, object]:
    return _fields_json((
        ("podRef", _pod_ref_json(stats.pod_ref)),
        ("memory", _memory_json(stats.memory)),
        ("process_stats", None if stats.process_count is None else {"process_count": stats.process_count}),
        ("containers", [_container_json(c) for c in stats.containers] or None),
        ("volume", _volumes_json(stats.volume_stats) or None),
        ("ephemeral-storage", _fs_json(stats.ephemeral_storage)),
    ))


def _node_blocks(node: NodeStats) -> tuple[tuple[str, object, Callable[[], object]], ...]:
    """The node's blocks: JSON name, the value compared with the last written, and its document (None: absent)."""
    rlimit = node.rlimit
    return (
        ("nodeName", node.node_name, lambda: node.node_name),
        ("memory", node.memory, lambda: _memory_json(node.memory)),
        ("fs", node.fs, lambda: _fs_json(node.fs)),
        ("runtime", (node.image_fs, node.container_fs), lambda: _fields_json((
            ("imageFs", _fs_json(node.image_fs)), ("containerFs", _fs_json(node.container_fs)))) or None),
        ("rlimit", rlimit, lambda: None if rlimit is None else _fields_json((
            ("time", _time_json(rlimit.time)), ("maxpid", rlimit.max_pid),
            ("curproc", rlimit.num_of_running_processes)))),
        ("systemContainers", node.system_containers,
         lambda: [_container_json(c) for c in node.system_containers.values()] or None),
    )


def _node_json(node: NodeStats) -> dict[str, object]:
    return _fields_json(tuple((name, document()) for name, _, document in _node_blocks(node)))


def summary_to_dict(summary: Summary) -> dict[str, object]:
    """Return the Summary API document of `summary` (absent values left out): `summary_from_dict` of it gives back
    an equal Summary."""
    return {"node": _node_json(summary.node), "pods": [_pod_stats_json(stats) for stats in summary.pods]}


# --- one Summary after another ------------------------------------------------------------------------------


def summary_pod_id(ref: Mapping[str, object] | PodReference) -> str:
    """The id changes know a pod's stats by: its UID, or namespace/name without one."""
    if isinstance(ref, PodReference):
        return ref.uid or f"{ref.namespace}/{ref.name}"
    return str(ref.get("uid") or f"{ref.get('namespace') or ''}/{ref.get('name') or ''}")


# A pod's blocks in the order of its document, by JSON name.
_BLOCKS = ("memory", "process_stats", "containers", "volume", "ephemeral-storage")


def _memory_text(memory: MemoryStats) -> str:
    """`_memory_json` as JSON text, written directly: a time and integers need no encoder."""
    parts = [] if memory.time is None else ['"time":"' + memory.time.isoformat() + '"']
    for name, value in zip(_MEMORY_NAMES, (memory.available_bytes, memory.usage_bytes, memory.working_set_bytes,
                                           memory.rss_bytes, memory.page_faults, memory.major_page_faults),
                           strict=True):
        if value is not None:
            parts.append(name + str(value))
    return "{" + ",".join(parts) + "}"


_MEMORY_NAMES = tuple(f'"{name}":' for name, _ in _MEMORY_COUNTERS)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _memory_row(index: int, memory: MemoryStats) -> str | None:
    """A pod's memory block in changes as JSON text (`None` for absent; the caller writes `null`): `[index, time
    (integer µs), availableBytes, usageBytes, workingSetBytes, rssBytes, pageFaults, majorPageFaults]`; None for a
    time not in UTC (written as a block). What changes every cycle for every pod: one list of rows, as text."""
    time = memory.time
    if time is None:
        stamp = None
    elif time.tzinfo is UTC:
        stamp = (time - _EPOCH) // _MICROSECOND
    else:
        return None
    return (f"[{index},{stamp},{memory.available_bytes},{memory.usage_bytes},{memory.working_set_bytes},"
            f"{memory.rss_bytes},{memory.page_faults},{memory.major_page_faults}]")


def _memory_from_row(row: Sequence[object]) -> dict[str, object]:
    """The document of the memory block of a row `_memory_row` wrote (without its index)."""
    if len(row) != 1 + len(_MEMORY_COUNTERS):
        raise ValueError(f"a memory row of {len(row) + 1} values, not {2 + len(_MEMORY_COUNTERS)}")
    time = row[0]
    memory: dict[str, object] = {}
    if time is not None:
        if not isinstance(time, int):
            raise ValueError(f"a memory row's time is not microseconds: {time!r:.40}")
        text = _ROW_TIMES.get(time)
        if text is None:  # every pod of a cycle has the same few times: each written once
            if len(_ROW_TIMES) >= _ROW_TIMES_KEPT:
                _ROW_TIMES.clear()
            text = _ROW_TIMES[time] = (_EPOCH + time * _MICROSECOND).isoformat()
        memory["time"] = text
    for name, value in zip(_MEMORY_KEYS, row[1:]):  # noqa: B905 (the length is checked above)
        if value is not None:
            memory[name] = value
    return memory


_MEMORY_KEYS = tuple(name for name, _ in _MEMORY_COUNTERS)
# The text of the times of memory rows read lately, by integer microseconds: at most so many, then forgotten.
_ROW_TIMES: dict[int, str] = {}
_ROW_TIMES_KEPT = 4096


def _block_texts(dumps: Dumps, stats: PodStats, last: _Pod | None) -> tuple[str | None, str | None, str | None]:
    """The text of a pod's containers, volumes and ephemeral storage (None: absent), reused from `last` if same."""
    old = last[0] if last is not None else None
    texts = last[1] if last is not None else (None, None, None)
    containers, volumes, ephemeral = stats.containers, stats.volume_stats, stats.ephemeral_storage
    return (
        None if not containers else texts[0] if old is not None and containers is old.containers
        else dumps([_container_json(c) for c in containers]),
        None if not volumes else texts[1] if old is not None and volumes is old.volume_stats
        else dumps(_volumes_json(volumes)),
        None if ephemeral is None else texts[2] if old is not None and ephemeral is old.ephemeral_storage
        else dumps(_fs_json(ephemeral)),
    )


# One pod as last encoded: its stats, and the text of their containers, volumes and ephemeral storage.
_Pod = tuple[PodStats, tuple[str | None, str | None, str | None]]
_Written = tuple[NodeStats, dict[str, _Pod], list[str]]


class SummaryChangesEncoder:
    """Encodes one Summary after another as JSON text: whole, or as what changed since the one last committed.

    Changes: `{"node", "pods", "memory", "removed", "order"}`: the node's changed blocks; pods changed (`id` and
    changed blocks; a new pod whole); memory rows (`_memory_row`); ids gone; every id only when the order is not the
    old one plus new pods. A pod's containers, volumes and ephemeral storage keep their text while they are the very
    objects encoded before; a memory block is written whenever it is a new object (comparing costs as much).
    """

    def __init__(self, dumps: Dumps) -> None:
        self._dumps = dumps
        # A pod's reference never changes: its id, the reference's text and the id's text.
        self._refs: dict[tuple[str, str, str], tuple[str, str, str]] = {}
        self._pods: dict[str, _Pod] = {}  # the last Summary encoded, by pod id
        # The last Summary committed (written for sure): changes are against it; None: write it whole next.
        self._written: _Written | None = None
        self._pending: _Written | None = None

    def reset(self) -> None:
        """Write the whole document next time (a new segment, or after a failed write)."""
        self._written = None

    def commit(self) -> None:
        """The text of the last `encode` was written: the next changes are against its Summary."""
        self._written = self._pending

    def encode(self, summary: Summary) -> tuple[str, str]:
        """Return ("summary", whole document) or ("summaryChanges", changes) as compact JSON text."""
        written = self._written
        known_refs = self._refs.get
        refs = [known_refs((ref.uid, ref.namespace, ref.name)) or self._ref(ref)
                for ref in (stats.pod_ref for stats in summary.pods)]
        ids = [ref[0] for ref in refs]
        pods: dict[str, _Pod] = {}
        if written is None or len(set(ids)) != len(ids):  # two pods with one id: changes could not say which
            text = ("summary", self._whole(summary, refs, pods))
        else:
            text = ("summaryChanges", self._changes(summary, refs, ids, written, pods))
        self._pods = pods
        self._pending = (summary.node, pods, ids) if len(pods) == len(ids) else None
        if len(self._refs) > 2 * len(ids) + 64:  # the pods of long ago
            self._refs = {(ref.uid, ref.namespace, ref.name): known
                          for ref, known in zip((stats.pod_ref for stats in summary.pods), refs, strict=True)}
        return text

    def whole(self, summary: Summary) -> str:
        """Return `summary` whole, as compact JSON text (reusing the texts of the last `encode`), changing nothing
        `encode` compares with."""
        return self._whole(summary, [self._ref(stats.pod_ref) for stats in summary.pods], {})

    def _whole(self, summary: Summary, refs: list[tuple[str, str, str]], pods: dict[str, _Pod]) -> str:
        # One join of every pod's blocks: per-pod joins then a document join made three copies at once.
        blocks = ['{"node":', self._dumps(_node_json(summary.node)), ',"pods":[']
        for index, (stats, ref) in enumerate(zip(summary.pods, refs, strict=True)):
            if index:
                blocks.append(",")
            self._pod_blocks(stats, ref, pods, blocks)
        blocks.append("]}")
        return "".join(blocks)

    def _pod(self, stats: PodStats, ref: tuple[str, str, str], pods: dict[str, _Pod]) -> str:
        """A pod's whole document; its stats and texts go into `pods`."""
        return "".join(self._pod_blocks(stats, ref, pods, []))

    def _pod_blocks(self, stats: PodStats, ref: tuple[str, str, str], pods: dict[str, _Pod],
                    blocks: list[str]) -> list[str]:
        """Append the text blocks of a pod's whole document to `blocks` (returned); stats and texts go into `pods`."""
        texts = _block_texts(self._dumps, stats, self._pods.get(ref[0]))
        pods[ref[0]] = (stats, texts)
        blocks += ['{"podRef":', ref[1]]
        if stats.memory is not None:
            blocks += [',"memory":', _memory_text(stats.memory)]
        if stats.process_count is not None:
            blocks.append(f',"process_stats":{{"process_count":{stats.process_count}}}')
        for name, text in zip(_BLOCKS[2:], texts, strict=True):
            if text is not None:
                blocks += [',"', name, '":', text]
        blocks.append("}")
        return blocks

    def _ref(self, ref: PodReference) -> tuple[str, str, str]:
        key = (ref.uid, ref.namespace, ref.name)
        known = self._refs.get(key)
        if known is None:
            pod_id = summary_pod_id(ref)
            known = self._refs[key] = (pod_id, self._dumps(_pod_ref_json(ref)), self._dumps(pod_id))
        return known

    def _changes(self, summary: Summary, refs: list[tuple[str, str, str]], ids: list[str], written: _Written,
                 pods: dict[str, _Pod]) -> str:
        old_node, old_pods, old_order = written
        parts: list[str] = []
        if summary.node is not old_node:
            node = [(name, document()) for (name, value, document), (_, before, _) in
                    zip(_node_blocks(summary.node), _node_blocks(old_node), strict=True)
                    if value is not before and value != before]
            if node:
                parts.append('"node":' + self._dumps(dict(node)))
        changed: list[str] = []
        rows: list[str] = []
        known = self._pods
        for index, (stats, ref) in enumerate(zip(summary.pods, refs, strict=True)):
            pod_id = ref[0]
            old_entry = old_pods.get(pod_id)
            if old_entry is None:  # a new pod: whole
                changed.append(self._pod(stats, ref, pods))
                continue
            old = old_entry[0]
            memory = stats.memory
            moved = memory is not old.memory
            row = _memory_row(index, memory) if moved and memory is not None else None
            if row is not None:
                rows.append(row)
            if stats.containers is old.containers and stats.volume_stats is old.volume_stats and \
                    stats.ephemeral_storage is old.ephemeral_storage and stats.process_count == old.process_count \
                    and (row is not None or not moved):
                # What most pods are, most cycles: only the memory readings moved (a pod's Python per cycle).
                pods[pod_id] = (stats, old_entry[1])
                continue
            last = known.get(pod_id, old_entry)
            blocks: list[str] = []
            if moved and row is None:
                blocks += [',"memory":', "null" if memory is None else _memory_text(memory)]
            if stats.process_count != old.process_count:
                blocks.append(',"process_stats":null' if stats.process_count is None else
                              f',"process_stats":{{"process_count":{stats.process_count}}}')
            containers, volumes, ephemeral = stats.containers, stats.volume_stats, stats.ephemeral_storage
            if containers is last[0].containers and volumes is last[0].volume_stats and \
                    ephemeral is last[0].ephemeral_storage:
                texts = last[1]
            else:
                texts = _block_texts(self._dumps, stats, last)
            if containers is not old.containers and containers != old.containers:
                blocks += [',"containers":', texts[0] or "null"]
            if volumes is not old.volume_stats and volumes != old.volume_stats:
                blocks += [',"volume":', texts[1] or "null"]
            if ephemeral is not old.ephemeral_storage and ephemeral != old.ephemeral_storage:
                blocks += [',"ephemeral-storage":', texts[2] or "null"]
            pods[pod_id] = (stats, texts)
            if blocks:
                changed.append('{"id":' + ref[2] + "".join(blocks) + "}")
        if changed:
            parts.append('"pods":[' + ",".join(changed) + "]")
        if rows:  # integers, and None (absent) as Python writes it
            parts.append('"memory":[' + ",".join(rows).replace("None", "null") + "]")
        if len(ids) != len(old_order) or ids != old_order:
            current = pods.keys()
            removed = [pod_id for pod_id in old_order if pod_id not in current]
            if removed:
                parts.append('"removed":' + self._dumps(removed))
            predicted = [pod_id for pod_id in old_order if pod_id in current] + [
                pod_id for pod_id in ids if pod_id not in old_pods]
            if predicted != ids:
                parts.append('"order":' + self._dumps(ids))
        return "{" + ",".join(parts) + "}"


def _listed(changes: Mapping[str, object], name: str) -> list[object]:
    value = changes.get(name)
    if value is None:
        return []
    if type(value) is not list:
        raise ValueError(f"summary changes' {name} is not a list")
    return value


def apply_summary_changes(document: Mapping[str, object], changes: Mapping[str, object]) -> dict[str, object]:
    """Return the Summary document `changes` (`SummaryChangesEncoder`) make of `document`; `document` is left as
    it is. Raises ValueError for changes that do not fit it."""
    old_pods = document.get("pods")
    if not isinstance(old_pods, list):
        raise ValueError("summary changes without a whole summary before them")
    pods: dict[str, object] = {}
    # (`type(...) is dict` first: a plain dict, every pod every cycle, skips the Mapping ABC check.)
    for pod in old_pods:
        ref = pod.get("podRef") if type(pod) is dict or isinstance(pod, Mapping) else None
        pods[summary_pod_id(ref if type(ref) is dict or isinstance(ref, Mapping) else {})] = pod
    before = list(pods)
    known = set(before)
    for changed in _listed(changes, "pods"):
        if not isinstance(changed, Mapping):
            raise ValueError(f"a pod's changes are not an object: {changed!r:.80}")
        if "id" not in changed:
            ref = changed.get("podRef")
            pods[summary_pod_id(ref if isinstance(ref, Mapping) else {})] = dict(changed)
            continue
        pod_id = str(changed["id"])
        old = pods.get(pod_id)
        if not isinstance(old, Mapping):
            raise ValueError(f"changes of pod {pod_id!r:.80}, which the summary before did not have")
        pod = dict(old)
        for name, value in changed.items():
            if name == "id":
                continue
            if value is None:
                pod.pop(name, None)
            else:
                pod[name] = value
        pods[pod_id] = pod
    for gone in _listed(changes, "removed"):
        pods.pop(str(gone), None)
    order = changes.get("order")
    if not isinstance(order, list):
        order = [i for i in before if i in pods] + [i for i in pods if i not in known]
    listed = [pods[i] for i in order if i in pods]
    for row in _listed(changes, "memory"):
        if not isinstance(row, list) or not row or not isinstance(row[0], int) or not 0 <= row[0] < len(listed):
            raise ValueError(f"a memory row of no pod: {row!r:.80}")
        pod = listed[row[0]]
        if type(pod) is not dict and not isinstance(pod, Mapping):
            raise ValueError(f"a memory row of a pod that is not an object: {pod!r:.80}")
        listed[row[0]] = {**pod, "memory": _memory_from_row(row[1:])}
    node = document.get("node")
    changed_node = changes.get("node")
    if isinstance(changed_node, Mapping):
        node = {**(node if isinstance(node, Mapping) else {}), **changed_node}
        for name, value in changed_node.items():
            if value is None:
                del node[name]
    return {"node": node, "pods": listed}
