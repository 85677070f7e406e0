"""A pod's folders on the node that count against its disk: disk-backed emptyDir volumes and container logs.

``volume_dirs``: emptyDir volumes under ``<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/``, skipping
those on another ``st_dev`` (tmpfs or hugetlbfs mounts: not node disk, ``IsLocalEphemeralVolume``).
``container_log_dirs``: ``<pod logs dir>/<namespace>_<name>_<uid>/<container>/`` (BuildPodLogsDirectory).

Invariants: every path returned is inside the folder listed (a name that is not one path component raises
SampleError); results are sorted by name; a missing folder has none; an unreadable one raises SampleError.
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
    """Return (volume name, folder) of each disk-backed emptyDir volume of a pod, sorted by name (mounts and
    non-folders left out). Raises SampleError when the folder cannot be read or `pod_uid` is not one component."""
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
    """Return (container, folder) of each of the pod's container log folders, by name (none without the folder).
    Raises SampleError when it cannot be read or a name part is not one path component."""
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
