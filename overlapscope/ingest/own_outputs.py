"""Files overlapscope itself wrote (reports, baselines, Perfetto exports, manifests), recognised by
their content, so that a report saved inside a run directory is never read as a rank's trace."""
from __future__ import annotations

import re
import zlib
from pathlib import Path

HEAD_BYTES = 4096
# Every JSON overlapscope writes names its schema near its start: "schema": "overlapscope.<kind>/<n>".
_SCHEMA = re.compile(rb'"schema"\s*:\s*"overlapscope\.(report|baseline|perfetto|manifest)/\d+"')


def written_by_overlapscope(path: Path) -> str | None:
    """'report', 'baseline', 'perfetto' or 'manifest' when the file is one overlapscope wrote, else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None  # the reader reports unreadable files
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, HEAD_BYTES)
        except zlib.error:
            return None
    m = _SCHEMA.search(head[:HEAD_BYTES])
    return m.group(1).decode() if m else None
