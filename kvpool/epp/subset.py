"""The proxy's subset hint of the endpoint picker protocol (docs/epp.md, "The subset hint").

The data plane may name the endpoints the picker must choose among, in the ProcessingRequest's
``metadata_context.filter_metadata``, namespace ``envoy.lb.subset_hint``, key
``x-gateway-destination-endpoint-subset``: a list of ``ip:port`` strings (a flat
comma-separated string too, as a header-to-metadata rule writes one). The picker then picks
only among the healthy replicas the hint names; none (an empty list, or only endpoints that
are no healthy replica) is a 503. With no such key the whole replica set is eligible.

NOTE(subset-match): an entry names a replica when its host and port are the replica's base
URL's (the port defaulting by scheme, as ``picker.endpoint_of`` writes it); an entry without a
port names the host on every port. IP addresses compare as addresses (``::0001`` is ``::1``,
``[::1]:80`` an IPv6 entry with its port); an entry that cannot be read names nothing.

NOTE(hint-cap): each entry is read on the event loop (``ipaddress.ip_address``, ~5 us), so a hint
of 500,000 entries (an 8.5 MB message, under the message cap) stopped every other call for ~2.8 s,
once per message carrying it. A hint of more than MAX_ENTRIES entries names nothing, as an
unreadable one does: the 503. Entries are counted before any is read, and only those that name
something: an empty one (``a,,b``, a trailing comma, an empty list element) is skipped when read,
so 4096 endpoints and a trailing comma are 4096 entries (counted by commas they were 4097: nothing
named, and the WARNING said so). The count stays cheap: the commas alone when they allow no more
than MAX_ENTRIES entries, else C-level scans (``_entries``: a regex match skips each run of
separators, ``str.find`` each entry) that stop past MAX_ENTRIES: ~2 ms for 500,000 entries, ~25 ms
for an 8.5 MB message of commas alone, never a Python step per empty entry (parsing that message
takes ~6 ms); a list of more than twice MAX_ENTRIES elements is refused by its length alone, as
reading its elements is a step each. 4096 is far above the endpoints of any InferencePool (pods of
one model server each) and above what a header-to-metadata rule can carry (Envoy's 60 KiB header
limit holds ~3,500 ``ip:port``); reading that many takes ~20 ms. The service reads a call's hint
once, from the first message that carries it (service.py ``EndpointPicker.step``).
"""

from __future__ import annotations

import ipaddress
import logging
import re
from urllib.parse import urlsplit

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from kvpool.throttle import Throttle

__all__ = ["MAX_ENTRIES", "SHOWN", "SUBSET_KEY", "SUBSET_NAMESPACE", "Subset", "subset_hint"]

log = logging.getLogger("kvpool.epp")

SUBSET_NAMESPACE = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
MAX_ENTRIES = 4096  # NOTE(hint-cap)
SHOWN = 8  # the entries a WARNING names at most (refusals.py NOTE(no-endpoint))
MAX_ELEMENTS = 2 * MAX_ENTRIES  # a list's elements, empty ones included (NOTE(hint-cap))
# what lies between two entries: commas and what ``str.strip`` strips (both Py_UNICODE_ISSPACE)
_SEPARATORS = re.compile(r"[\s,]*")
_too_long = Throttle(60.0)  # one WARNING a minute at most for hints past MAX_ENTRIES


def _host(host: str) -> str:
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        return host.lower()


def host_port(url: str) -> tuple[str, int]:
    """``(host, port)`` of a replica base URL, the scheme's default port when none is given
    (the picker's ``endpoint_of`` writes the same pair)."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def _entry(text: str) -> tuple[str, int | None] | None:
    """``(host, port)`` of an ``ip:port`` / ``[v6]:port`` / bare host entry (None: unreadable)."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:  # a bare IPv4 address or host name, or a bare IPv6 address
        host, port = text, None
    if not host or (port is not None and not (port.isascii() and port.isdigit()
                                               and len(port) <= 5)):
        return None  # a port of 4300+ digits made int() raise: the call failed INTERNAL
    return _host(host), None if port is None else int(port)


class Subset:
    """The endpoints a hint names (NOTE(subset-match)); ``entries`` counts its entries and
    ``shown`` keeps the first few as given, for the WARNING of a hint naming no replica the
    picker knows (refusals.py NOTE(no-endpoint))."""

    __slots__ = ("pairs", "entries", "shown")

    def __init__(self, entries: list[str]) -> None:
        self.pairs = {p for p in map(_entry, entries) if p is not None}
        self.entries = len(entries)
        self.shown = entries[:SHOWN]

    def allows(self, url: str) -> bool:
        """Whether the hint names the replica at base URL ``url``."""
        host, port = host_port(url)
        host = _host(host)
        return (host, port) in self.pairs or (host, None) in self.pairs


def _entries(items: list[str]) -> int:
    """How many entries of ``items`` name something (not empty once stripped), counted up to
    MAX_ENTRIES + 1, none read (NOTE(hint-cap))."""
    n = 0
    for item in items:
        pos = _SEPARATORS.match(item).end()
        while n <= MAX_ENTRIES and pos < len(item):
            n += 1
            pos = item.find(",", pos)
            if pos < 0:
                break
            pos = _SEPARATORS.match(item, pos).end()
    return n


def _too_many() -> Subset:
    """A hint past MAX_ENTRIES (or MAX_ELEMENTS): it names nothing (NOTE(hint-cap))."""
    if _too_long.due():
        log.warning("kvpool epp: a subset hint of more than %d entries (or %d list elements) "
                    "names nothing (none is read): have the gateway send fewer, or none",
                    MAX_ENTRIES, MAX_ELEMENTS)
    return Subset([])


def subset_hint(req: pb.ProcessingRequest) -> Subset | None:
    """The hint ``req`` carries (None: it names no subset, so every replica is eligible). A
    key whose value is neither a string nor a list names no endpoint: nothing is eligible; so
    does one of more than MAX_ENTRIES non-empty entries, none of them read (NOTE(hint-cap))."""
    meta = req.metadata_context.filter_metadata
    if SUBSET_NAMESPACE not in meta or SUBSET_KEY not in meta[SUBSET_NAMESPACE].fields:
        return None
    value = meta[SUBSET_NAMESPACE].fields[SUBSET_KEY]
    kind = value.WhichOneof("kind")
    if kind == "list_value" and len(value.list_value.values) > MAX_ELEMENTS:
        return _too_many()
    if kind == "string_value":
        items = [value.string_value]
    elif kind == "list_value":
        items = [v.string_value for v in value.list_value.values
                 if v.WhichOneof("kind") == "string_value"]
    else:
        items = []
    if sum(item.count(",") + 1 for item in items) > MAX_ENTRIES and _entries(items) > MAX_ENTRIES:
        return _too_many()
    return Subset([e.strip() for item in items for e in item.split(",") if e.strip()])
