"""Cut a Kineto document's traceEvents array into pieces that decode on their own.

A large trace decoded whole holds the JSON text and one Python object per event at once (3-4x the
JSON). Decoded a few MiB of events at a time, each piece's objects become compact columns before
the next piece is decoded. The cuts are found by text search, then proven by the decode itself:
`[` + piece + `]` is valid JSON only if the cut lies between two events of the array (the text
before a cut is the document's own, so a cut inside a string or a nested value leaves a string or
a bracket open there); the caller decodes the whole document as before when any piece fails.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

PIECE_BYTES = 4 << 20
"""JSON text per piece: the decoded objects of one piece are alive at a time (~2.5x its text)."""
_KEY = b'"traceEvents"'
_ARRAY_OPEN = re.compile(rb'"traceEvents"\s*:\s*\[\s*')
_BETWEEN = re.compile(rb"\}\s*,\s*\{")


@dataclass(frozen=True)
class Cuts:
    """Where the pieces of one document are.

    head:   the text before the traceEvents key, closed as `{..., "traceEvents": []}`.
    pieces: (start, end) of the middle pieces: events, whole, separated by commas.
    tail:   where the last piece starts: `{"traceEvents": [` + text[tail:] is a document holding
            the last events and the top-level fields after the array.
    """

    head: bytes
    pieces: list[tuple[int, int]]
    tail: int


def cut(text: bytes | bytearray, piece_bytes: int | None = None) -> Cuts | None:
    """The cuts of a document with one traceEvents key, or None (decode it whole)."""
    piece_bytes = PIECE_BYTES if piece_bytes is None else piece_bytes
    # `"traceEvents"` followed by `:` is always an object key (a string holding it escapes its
    # quotes); the decode of `head` proves the first one is the document's own. A second key of
    # that name at the top level can only follow the array: in a middle piece it fails that
    # piece's decode (the piece then holds the array's closing bracket); in the tail it would
    # silently override the first, so a tail holding the key is left to the whole document.
    opened = _ARRAY_OPEN.search(text)
    if opened is None:
        return None
    head = bytes(text[:opened.start()]) + b'"traceEvents": []}'
    pieces, start = [], opened.end()
    while True:
        between = _BETWEEN.search(text, start + piece_bytes)
        if between is None:
            return Cuts(head=head, pieces=pieces, tail=start) if text.find(_KEY, start) < 0 else None
        pieces.append((start, between.start() + 1))
        start = between.end() - 1
