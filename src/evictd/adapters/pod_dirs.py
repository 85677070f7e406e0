"""A pod's folders on the node that count against its disk: disk-backed emptyDir volumes and container logs.

Job: list, for one pod, the folders `evictd.adapters.disk_usage` measures: ``volume_dirs`` its emptyDir volumes
under ``<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/``, ``container_log_dirs`` its containers' log
folders under ``<pod logs dir>/<namespace>_<name>_<uid>/`` (the kubelet's BuildPodLogsDirectory).

Memory-backed volumes: an emptyDir with medium ``Memory`` (tmpfs) or ``HugePages`` (hugetlbfs) is a mount
of another filesystem on its volume directory. ``volume_dirs`` skips every volume directory whose
``st_dev`` differs from that of its parent ``kubernetes.io~empty-dir`` folder: such volumes do not use node
disk and the kubelet leaves them out of a pod's disk usage (KUBELET_SPEC §9.3, ``IsLocalEphemeralVolume``).

Invariants: every path returned is inside the folder listed (a pod uid, namespace or name that is not a single
path component raises SampleError, never escapes it); results are sorted by name; a pod without the folder has
none; a folder that cannot be read raises SampleError naming it.
"""

from __future__ import annotations

import os
import stat

from evictd.core.errors import SampleError, os_error_reason

# Folder of the emptyDir plugin under <kubelet root>/pods/<uid>/volumes (escaped "kubernetes.io/empty-dir").
EMPTY_DIR_PLUGIN_DIR = "kubernetes.io~empty-dir"

# The kubelet joins namespace, name and uid of a pod with "_" to name its log folder (BuildPodLogsDirectory).
POD_LOG_DIR_DELIMITER = "_"

# Errors that mean "this path is not there (any more)": a missing entry or a component that is not a folder.
_GONE = (FileNotFoundError, NotADirectoryError)


def volume_dirs(kubelet_root: str, pod_uid: str) -> list[tuple[str, str]]:
    """Return (volume name, folder) of each disk-backed emptyDir volume of a pod, sorted by name.

    Lists ``<kubelet_root>/pods/<pod_uid>/volumes/kubernetes.io~empty-dir/``. Volume folders that are mount
    points of another filesystem (memory-backed emptyDirs) and entries that are not folders are left out; a
    pod without that folder has none. Raises SampleError when the folder cannot be read, or when `pod_uid`
    is not a single path component.
    """
    uid = _component(kubelet_root, "pod uid", pod_uid)
    # Called for every pod every pass: plain string joins (os.path.join's result, without its cost).
    plugin_dir = f"{os.path.join(kubelet_root, '')}pods/{uid}/volumes/{EMPTY_DIR_PLUGIN_DIR}"
    volumes: list[tuple[str, str]] = []
    try:
        plugin_device = os.stat(plugin_dir).st_dev
        with os.scandir(plugin_dir) as entries:
            for entry in entries:
                try:
                    entry_stat = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # volume torn down while listing
                if stat.S_ISDIR(entry_stat.st_mode) and entry_stat.st_dev == plugin_device:
                    volumes.append((entry.name, entry.path))
    except _GONE:
        return []
    except OSError as exc:
        raise SampleError(plugin_dir, os_error_reason(exc)) from exc
    if len(volumes) > 1:
        volumes.sort()
    return volumes


def container_log_dirs(pod_logs_dir: str, namespace: str, name: str, uid: str) -> list[tuple[str, str]]:
    """Return (container, folder) of each ``<pod_logs_dir>/<namespace>_<name>_<uid>/<container>/``, by name.

    A pod without a log folder has none. Raises SampleError when the folder cannot be read, or when a part
    of its name is not a single path component.
    """
    parts = (("namespace", namespace), ("name", name), ("uid", uid))
    folder = os.path.join(pod_logs_dir, POD_LOG_DIR_DELIMITER.join(_component(pod_logs_dir, *part) for part in parts))
    try:
        with os.scandir(folder) as entries:
            names = sorted([entry.name for entry in entries if entry.is_dir(follow_symlinks=False)])
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SampleError(folder, os_error_reason(exc)) from exc
    return [(container, f"{folder}/{container}") for container in names]


def _component(base: str, what: str, value: str) -> str:
    """Return `value` if it names exactly one entry inside a folder; raise SampleError otherwise."""
    if value in ("", ".", "..") or "/" in value or "\0" in value:
        raise SampleError(base, f"{what} {value!r} is not a single path component")
    return value
