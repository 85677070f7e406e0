"""Replacing a small state file in stateDir so that a crash leaves either the old or the new file.

Write to a temporary file beside it (`prefix`, so a reader can find and remove those a killed process left
behind), fsync, rename over the file. Used by the eviction journal and the critical-pod record.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any


def write_json_atomically(path: str, document: Any, *, prefix: str = ".tmp-") -> None:
    """Replace `path` with `document` as JSON (the folder is created if missing). Raises OSError."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=prefix, dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            json.dump(document, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
