"""Reading configuration files: a YAML stream from a regular file of bounded size, or standard input (read once
per process), each document with the mapping keys it holds twice; and the files of a kubelet drop-in folder in the
kubelet's order. Nothing here knows the kinds of documents: `evictd.config` decides what they say.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Hashable
from typing import Any

import yaml

from evictd.core.dropin import DROPIN_EXTENSION
from evictd.core.errors import ConfigError, FilePath

# A configuration file is a few KiB; anything past this is not one (and `/dev/zero` would never end).
MAX_CONFIG_BYTES = 4 << 20

STDIN_PATHS = ("-", "/dev/stdin")


def read_documents(path: str, key: str = "--config", *, stdin_ok: bool = False) -> list[tuple[Any, tuple[str, ...]]]:
    """Return each non-empty document of the YAML file at `path` with the mapping keys it holds twice: a regular
    file of at most MAX_CONFIG_BYTES, or with `stdin_ok` standard input (STDIN_PATHS). Huge numbers, deep nesting
    and invalid YAML are configuration errors. Raises ConfigError."""
    raw = _stdin_bytes() if stdin_ok and path in STDIN_PATHS else _read_regular_file(path, key)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"file larger than {MAX_CONFIG_BYTES >> 20} MiB", key=key, value=FilePath(path))
    return _documents(raw, path, key)


_stdin_read: list[bytes] = []  # what standard input gave, for every later read of it in this process


def _stdin_bytes() -> bytes:
    """Standard input to its end (at most MAX_CONFIG_BYTES + 1), read once: every later load gets the same bytes."""
    if not _stdin_read:
        _stdin_read.append(sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1))
    return _stdin_read[0]


def _read_regular_file(path: str, key: str) -> bytes:
    try:
        # Non-blocking: opening a FIFO for reading would otherwise wait for a writer forever.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise ConfigError("not a regular file", key=key, value=FilePath(path))
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror}", key=key, value=FilePath(path)) from None
    return raw


def _documents(raw: bytes, path: str, key: str) -> list[tuple[Any, tuple[str, ...]]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError("file is not UTF-8 text", key=key, value=FilePath(path)) from None
    documents = []
    loader: _DuplicateNoticingLoader | None = None
    try:
        loader = _DuplicateNoticingLoader(text)  # its reader refuses control characters at once
        while loader.check_data():  # type: ignore[no-untyped-call]
            loader.duplicates = []
            document = loader.get_data()
            if document is not None:
                documents.append((document, tuple(loader.duplicates)))
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {_one_line(str(exc))}", key=key, value=FilePath(path)) from None
    except RecursionError:
        raise ConfigError("YAML nested too deeply", key=key, value=FilePath(path)) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise ConfigError(f"unreadable value: {_one_line(str(exc))[:120]}", key=key, value=FilePath(path)) from None
    finally:
        if loader is not None:
            loader.dispose()
    return documents


# A YAML merge key (`<<`): its mapping's keys are merged into the mapping that holds it.
MERGE_KEY_TAG = "tag:yaml.org,2002:merge"


class _DuplicateNoticingLoader(yaml.SafeLoader):
    """PyYAML's safe loader, remembering the keys a mapping of the current document holds twice."""

    duplicates: list[str]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_KEY_TAG:  # `<<: *defaults`: merged by the base class, as the kubelet's YAML does
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable):
                if key in seen:
                    self.duplicates.append(str(key))
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def dropin_files(folder: str, key: str = "--config-dir") -> list[str]:
    """Return the kubelet drop-in files under `folder` in the order the kubelet merges them: a walk in lexical
    order (subfolders entered where their names fall), files ending in DROPIN_EXTENSION only. Raises ConfigError
    when the folder cannot be read."""
    if not os.path.isdir(folder):
        raise ConfigError("not a folder (the kubelet's --config-dir names a folder of .conf drop-ins)", key=key,
                          value=FilePath(folder))
    found: list[str] = []

    def walk(current: str) -> None:
        try:
            entries = sorted(os.scandir(current), key=lambda entry: entry.name)
        except OSError as exc:
            raise ConfigError(f"cannot read folder: {exc.strerror}", key=key, value=FilePath(current)) from None
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                walk(entry.path)
            elif entry.name.endswith(DROPIN_EXTENSION):
                found.append(entry.path)

    walk(folder)
    return found
