"""The node's own kubelet configuration file, read beside evictd's for the hand-over report (who evicts on each
signal: `evictd.core.handover`).

What the kubelet itself enforces is in the file it was started with: `--kubelet-config PATH` of `check-config`,
`run` and `shadow-report` (`''`: none), else `<kubeletRootDir>/config.yaml` when it is a file (kubeadm's). As the
kubelet, only the first document and its eviction fields are read; `--kubelet-config-dir` drop-ins merge as the
kubelet's (`evictd.core.dropin`); its command-line flags are not seen (a documented limit). A file the option names
that cannot be read or decoded is a configuration error (exit 2); the default file's problems are only noted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from evictd.config import classify_document, read_dropins
from evictd.config_files import read_documents
from evictd.core.dropin import with_dropins
from evictd.core.errors import ConfigError, FilePath
from evictd.core.kubelet_config import KUBELET_KIND, EvictionSettings, eviction_settings, merge_documents
from evictd.core.thresholds import Threshold

OPTION = "--kubelet-config"
DIR_OPTION = "--kubelet-config-dir"
# Under kubeletRootDir: where kubeadm writes the kubelet's configuration file.
DEFAULT_FILE_NAME = "config.yaml"


@dataclass(frozen=True, slots=True)
class KubeletFile:
    """The kubelet's configuration as found: its path and eviction settings, or why there are none."""

    path: str | None
    eviction: EvictionSettings | None
    note: str  # how it was found, or why it was not read

    def thresholds(self) -> list[Threshold] | None:
        """The kubelet's thresholds, or None when its configuration is unknown."""
        return None if self.eviction is None else self.eviction.thresholds()


def default_path(kubelet_root_dir: str) -> str:
    return os.path.join(kubelet_root_dir, DEFAULT_FILE_NAME)


def find_kubelet_file(option: str | None, kubelet_root_dir: str, config_dir: str | None = None) -> KubeletFile:
    """Return the kubelet's configuration named by `option` (None: the default file if any; empty: none), with
    `config_dir`'s drop-ins merged. ConfigError for a named file or folder that cannot be read or decoded."""
    dropins = f" + {DIR_OPTION} {config_dir}" if config_dir else ""
    if option is not None:
        if not option:
            if config_dir:
                raise ConfigError(f"needs the kubelet's configuration file ({OPTION}): its drop-ins merge onto it",
                                  key=DIR_OPTION, value=FilePath(config_dir))
            return KubeletFile(None, None, f"not read ({OPTION} '')")
        return KubeletFile(option, read_kubelet_eviction(option, config_dir), f"{OPTION} {option}{dropins}")
    path = default_path(kubelet_root_dir)
    if not os.path.isfile(path):
        if config_dir:
            raise ConfigError(f"needs the kubelet's configuration file: none at {path}; name it with {OPTION}",
                              key=DIR_OPTION, value=FilePath(config_dir))
        return KubeletFile(None, None, f"not found at {path} (kubeletRootDir/{DEFAULT_FILE_NAME}); name it with "
                                       f"{OPTION} PATH")
    if config_dir:  # named by an option: a problem is an error, as for the file itself
        return KubeletFile(path, read_kubelet_eviction(path, config_dir), f"{path} (the default: kubeletRootDir/"
                                                                          f"{DEFAULT_FILE_NAME}){dropins}")
    try:
        return KubeletFile(path, read_kubelet_eviction(path), f"{path} (the default: kubeletRootDir/"
                                                              f"{DEFAULT_FILE_NAME})")
    except ConfigError as exc:
        return KubeletFile(None, None, f"{path} cannot be used: {exc}")


def read_kubelet_eviction(path: str, config_dir: str | None = None) -> EvictionSettings:
    """Return the eviction settings of the kubelet configuration file at `path` (its first document, defaulted as
    the kubelet defaults it), with the drop-ins of `config_dir` merged onto it. Raises ConfigError naming the option
    and path, or the field and its value."""
    documents = read_documents(path, key=OPTION)
    if not documents:
        raise ConfigError("holds no document (the kubelet would run with its defaults; say so with a "
                          "KubeletConfiguration document)", key=OPTION, value=FilePath(path))
    document = documents[0][0]
    where = f"{OPTION} {path}"
    if classify_document(document, where) != KUBELET_KIND:
        raise ConfigError(f"the kubelet reads the first document of its file: it must be a {KUBELET_KIND}",
                          key=f"{where}.kind", value=document.get("kind"))
    dropins = [dropin for _, dropin in read_dropins(config_dir, DIR_OPTION)] if config_dir else []
    if config_dir:
        where += f" + {DIR_OPTION} {config_dir}"
    try:
        merged = with_dropins(document, dropins) if config_dir else merge_documents([document])
        settings = eviction_settings(merged)
        settings.thresholds()
    except ConfigError as exc:
        if exc.key is None:
            raise ConfigError(f"{where}: {exc.reason}") from None
        raise exc.at(f"{where}: {exc.key}", exc.value) from None
    return settings
