"""Prints the machine's main Debian apt source (deb822) with its suite replaced: provision-uml.sh's input.

usage: debian_source.py SOURCES_FILE SUITE. The first stanza whose URIs do not end in -security is kept,
with `Suites:` set to SUITE, so the newer package comes from the same mirror apt already uses here.
"""

from __future__ import annotations

import sys


def main(path: str, suite: str) -> int:
    with open(path, encoding="utf-8") as sources:
        stanzas = sources.read().split("\n\n")
    for stanza in stanzas:
        fields = [line for line in stanza.splitlines() if line and not line.startswith("#")]
        uris = next((line for line in fields if line.startswith("URIs:")), "")
        if uris and not uris.rstrip().endswith("-security"):
            print("\n".join(f"Suites: {suite}" if line.startswith("Suites:") else line for line in fields))
            return 0
    print(f"no Debian source in {path}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
