"""Host-header check: the dashboard answers only requests addressed to it by a name it knows.

A page on another site can make a browser send requests to 127.0.0.1 under its own name (DNS
rebinding); with the Host header checked, such requests get 403 and no trace name, path or
number leaves the server.
"""
from __future__ import annotations

from typing import Iterable

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names requests may carry: the bound address, localhost, and the --allow-host names."""
    names = {bound.strip("[]").lower(), *LOCAL_NAMES, *(h.strip("[]").lower() for h in extra if h)}
    names.discard("0.0.0.0")  # a wildcard bind is no name a browser uses: name the hosts with --allow-host
    names.discard("::")
    return frozenset(names)


def host_name(header: str) -> str:
    """The host part of a Host header ('[::1]:8050' -> '::1', 'Example.org:80' -> 'example.org')."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def restrict_hosts(server, allowed: frozenset[str]) -> None:
    """Make the Flask `server` answer 403 to any request whose Host is not in `allowed`."""
    from flask import abort, request

    @server.before_request
    def _check_host():  # noqa: ANN202 - a Flask hook
        if host_name(request.host or "") not in allowed:
            abort(403, description="this dashboard answers only requests addressed to its own host name "
                                   "(start it with --allow-host NAME to add one)")
