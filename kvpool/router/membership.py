"""Replicas that come and go while the router runs: an admin API and a watched file.

Admin API (only with ``--admin-token-file``; every call sends ``Authorization: Bearer <token>``)::

    GET    /v1/kvpool/replicas                  -> 200 {"replicas": [{url, name, healthy,
                                                                          in_flight}]}
    POST   /v1/kvpool/replicas {"url": U}       -> 201 added (200: already a member)
           (+ "name": N, its /metrics label)        (a member renamed when N is given)
    DELETE /v1/kvpool/replicas {"url": U}       -> 200 removed, its streams drain (404: none)
    no or a wrong token -> 401; the API off (no token file) -> 403; a body that is not a JSON
    object with a URL string, a URL that is not http(s)://host[:port], a name that is not
    ``replica_spec``'s or is another replica's -> 400; a declared body past --max-body-bytes
    -> 413, a transfer coding before chunked -> 501, both before the body is read; a body
    holding more JSON values than the router decodes itself, or nested too deeply -> 400
    (NOTE(admin-body))

Watched file (``--replicas-file``): one base URL per line, ``NAME=URL`` to name it as
``--replica`` does (``replica_spec``; blank lines and ``#`` comments skipped), read every
``poll`` seconds and applied when its text changed (NOTE(mtime): a file's mtime ticks
coarsely, so an edit of the same size right after a read could keep mtime and size; a small
file read twice a second costs microseconds, and an atomic rename is seen too). The file owns
the URLs it lists: a URL that leaves the file leaves the router; a missing or unreadable
file changes nothing (logged once), and so does a file with lines of which none is a replica
(an unrendered template, a wrong file: NOTE(all-bad)), while a file with no lines at all
(blank or comments only) means no replicas from the file. Write it by rename: a file caught
half-written lists fewer replicas until the next read. Replicas given with ``--replica`` or the
API stay unless the file listed them and then dropped them. Each read is applied whole
(NOTE(snapshot)): after it, the file's replicas are labelled as its lines say, a bare URL
HOST:PORT, whatever the order of the lines, a swap or a chain of renames included.

NOTE(snapshot): the file used to be applied a URL at a time, each new label checked against the
labels of the moment, so a label another line of the same edit gave up (pod-a moved to a new
replica, the old one renamed pod-b) was refused as taken: the new replica never joined, and the
text, recorded as read, was never applied again. Now the labels are checked as the file states
them (docs/architecture.md, Router: the replicas file). Only a label the file itself gives
twice (two lines, or two URLs of one HOST:PORT left unnamed), or one a replica from
``--replica`` or the API holds, is refused: the first line giving it keeps it (that replica
keeps its own), each later one is skipped (its URL leaves the router if the file brought it in,
stays as it was if it came from ``--replica`` or the API, or does not join) and logged once per
read; a line refused for a label held outside the file is tried again at
each look (the whole file applied again), so its replica joins once that one leaves or is
renamed.

What joining and leaving mean for traffic is ReplicaSet's (replicas.py): a new replica takes
requests after its first passing /health beat; a removed one gets no new requests and finishes
the ones it runs. Replicas may be any host the operator names: only the URL's shape is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import re
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import web

from kvpool.errors import RequestError
from kvpool.router.relayed import BodyReader
from kvpool.router.replicas import ReplicaSet, default_name
from kvpool.server.api_key import bearer_token
from kvpool.server.middleware import APIError

__all__ = ["ADMIN_PATH", "Membership", "bearer", "carries_token", "read_token", "replica_spec",
           "replica_url"]

log = logging.getLogger("kvpool.router")
ADMIN_PATH = "/v1/kvpool/replicas"
DEFAULT_POLL = 0.5  # seconds between two looks at the replicas file


# a DNS name, an IPv4 address or an IPv6 one (urlsplit strips its brackets): no spaces,
# no control or other characters a URL host cannot hold
_HOST = re.compile(r"[A-Za-z0-9._-]+|[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?")
# a replica's name (its /metrics label): a pod or service name's characters, no ':' (so no
# name is ever a HOST:PORT default) and nothing a URL's user part or query could hide in
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def replica_spec(text: str) -> tuple[str, str | None]:
    """``[NAME=]URL`` as (base URL, NAME or None), or ValueError saying what is wrong: NAME
    labels the replica's series on the router's /metrics in place of its URL's HOST:PORT
    (replicas.py NOTE(replica-series)); the URL as ``replica_url`` takes it."""
    head, sep, rest = text.strip().partition("=")
    if not sep or "/" in head:  # no name: a bare URL (an '=' after '//' is in its query)
        return replica_url(text), None
    if not _NAME.fullmatch(head):
        raise ValueError(f"{_shown(text.strip())!r}: a replica name (NAME=URL) is letters, "
                         "digits, '.', '_' or '-', at most 128")
    return replica_url(rest), head


def name_of(value: object) -> str | None:
    """An admin API body's ``name`` (absent: None), or ValueError."""
    if value is None:
        return None
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise ValueError("the name is letters, digits, '.', '_' or '-', at most 128")
    return value


def replica_url(text: str) -> str:
    """``text`` as a replica base URL (no trailing slash), or ValueError saying what is wrong
    (NOTE(no-userinfo))."""
    parts = urlsplit(text.strip())
    shown = _shown(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{shown!r} is not a replica URL: give http(s)://HOST[:PORT], "
                         "e.g. http://10.0.0.7:8000")
    try:
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:
        port = 0
    if port == 0:  # urlsplit lets port 0 through: nothing listens there
        raise ValueError(f"{shown!r}: the port is not a number in 1-65535")
    if not _HOST.fullmatch(parts.hostname):
        raise ValueError(f"{shown!r}: the host is not a name or an IP address")
    if parts.path not in ("", "/") or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"{shown!r}: give the base URL only (no path, query or user)")
    return f"{parts.scheme}://{parts.netloc}"


def _shown(text: str) -> str:
    """NOTE(no-userinfo): a replica URL is refused with its user part (``user:password@``)
    or a query (``?token=...``), so no password reaches the router's /metrics labels, /health
    or the admin API's list; the refusal quotes it with all before its last ``@`` but the
    scheme masked, and its query and fragment masked, as the --replica flag, an admin API 400
    body or a --replicas-file warning in the log would show it."""
    if "@" in text:
        scheme, sep, _ = text.partition("://")
        host = text.rpartition("@")[2]
        text = f"{scheme}{sep}***@{host}" if sep else f"***@{host}"
    for mark in ("?", "#"):
        if mark in text:
            text = text.partition(mark)[0] + mark + "***"
    return text


def bearer(token: str) -> bytes:
    """``token`` as carries_token compares it."""
    return token.encode()


def carries_token(request: web.Request, expected: Sequence[bytes]) -> bool:
    """Whether ``request``'s Authorization carries one of ``expected`` (``bearer`` values)
    as its Bearer token (the scheme in any case, as the replicas read it: bearer_token), each
    compared in constant time."""
    token = bearer_token(request.headers)
    got = token.encode("utf-8", "surrogateescape")
    return any([hmac.compare_digest(got, want) for want in expected]) and bool(token)


def read_token(path: str) -> str:
    token = Path(path).read_text().strip()
    if not token:
        raise ValueError(f"--admin-token-file {path}: the file is empty; write a token into it")
    return token


class Membership:
    """Changes a ReplicaSet's members from the admin API and the watched file."""

    def __init__(self, replicas: ReplicaSet, *, admin_token: str | None = None,
                 replicas_file: str | None = None, poll: float = DEFAULT_POLL) -> None:
        self.replicas = replicas
        self.expected = None if admin_token is None else bearer(admin_token)
        self.path = None if replicas_file is None else Path(replicas_file)
        self.poll = poll
        self.seen: str | None = None  # the file's text as last read
        self.listed: dict[str, str | None] = {}  # URL -> name of the last file applied
        self.from_file: set[str] = set()  # the URLs the file brought in when last applied
        self.refused: set[str] = set()  # its lines' refusals logged (NOTE(snapshot))
        self.blocked = False  # a line refused for a label held outside the file
        self.missing_logged = False
        self.bodies = BodyReader()  # the admin bodies' reader (NOTE(admin-body))

    def install(self, app: web.Application) -> None:
        """The admin route (before the router's catch-all), the file watcher's lifetime and
        the body reader's."""
        app.router.add_route("*", ADMIN_PATH, self.handle)
        app.on_cleanup.append(self._close_bodies)
        if self.path is not None:
            app.cleanup_ctx.append(self._watching)

    async def _close_bodies(self, app: web.Application) -> None:
        self.bodies.close()

    # ---------------------------------------------------------------- admin API
    def _authorize(self, request: web.Request) -> None:
        if self.expected is None:
            raise APIError(403, "the replica admin API is off: start kvpool router with "
                                "--admin-token-file PATH", code="admin_disabled")
        if not carries_token(request, [self.expected]):
            raise APIError(401, "invalid or missing admin token: send 'Authorization: Bearer "
                                "<token>'", code="invalid_admin_token",
                           headers={"WWW-Authenticate": "Bearer"})

    async def handle(self, request: web.Request) -> web.Response:
        self._authorize(request)
        if request.method == "GET":
            return self.listing()
        if request.method not in ("POST", "DELETE"):
            raise web.HTTPMethodNotAllowed(request.method, ["GET", "POST", "DELETE"])
        url, name = await self._url_of(request)
        if request.method == "POST":
            added = self.replicas.find(url) is None
            try:
                r = self.replicas.add(url, name)
            except ValueError as exc:  # the name is another replica's
                raise APIError(400, str(exc), param="name", code="invalid_name") from None
            return web.json_response({"url": url, "name": r.name, "added": added},
                                     status=201 if added else 200)
        gone = self.replicas.remove(url)
        if gone is None:
            raise APIError(404, f"{url} is not a replica of this router", param="url",
                           code="replica_not_found")
        return web.json_response({"url": url, "removed": True, "draining": gone.in_flight})

    def listing(self) -> web.Response:
        return web.json_response({"replicas": [
            {"url": r.url, "name": r.name, "healthy": r.healthy, "in_flight": r.in_flight}
            for r in self.replicas.replicas]})

    async def _url_of(self, request: web.Request) -> tuple[str, str | None]:
        # NOTE(admin-body): read and checked as a relayed body is (relayed.py NOTE(gil)): the
        # head refused first, within the body timeout, inflated and decoded off the event loop
        # when large, its JSON values and depth bounded. json.loads on the loop let one admin
        # call of a 4 MiB body stall every proxied stream, and a deeply nested one was a 500
        try:
            _, body = await self.bodies.read(request)
        except RequestError as exc:
            raise APIError(400, f'{exc}: the body must be a JSON object like {{"url": '
                                f'"http://10.0.0.7:8000"}}', code="invalid_json") from None
        if body is None:  # more values than the router decodes: never {"url", "name"}
            raise APIError(400, "the body holds far more JSON values than a replica's "
                                '{"url", "name"}', code="invalid_json")
        if not isinstance(body, dict) or not isinstance(body.get("url"), str):
            raise APIError(400, 'give the replica as {"url": "http://HOST:PORT"}', param="url",
                           code="invalid_url")
        try:
            url = replica_url(body["url"])
        except ValueError as exc:
            raise APIError(400, str(exc), param="url", code="invalid_url") from None
        try:
            return url, name_of(body.get("name"))
        except ValueError as exc:
            raise APIError(400, str(exc), param="name", code="invalid_name") from None

    # ---------------------------------------------------------------- watched file
    async def _watching(self, app: web.Application) -> AsyncIterator[None]:
        self.check_file()  # the file's replicas join before the first health poll
        task = asyncio.create_task(self._watch(), name="router-replicas-file")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll)
            self.check_file()

    def check_file(self) -> None:
        """Read the file and apply what it lists, if that changed since the last look (or a
        line of it waits for a label held outside the file: NOTE(snapshot))."""
        assert self.path is not None
        try:
            text = self.path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            if not self.missing_logged:
                log.warning("--replicas-file %s cannot be read (%s): replicas unchanged; "
                            "write it as UTF-8 text, one URL per line", self.path, exc)
                self.missing_logged = True
            return
        self.missing_logged = False
        if text == self.seen and not self.blocked:
            return
        if text != self.seen:
            self.seen = text
            urls, bad = self._read(text)
            if bad and not urls:
                # NOTE(all-bad): lines but no replica among them is a file gone wrong (a
                # template left unrendered, another file), not "no replicas": the last good
                # membership stays, as for a file that cannot be read
                log.warning("--replicas-file %s: no line is a replica (%s%s): nothing "
                            "applied, replicas unchanged", self.path, bad[0],
                            f"; {len(bad) - 1} more" if len(bad) > 1 else "")
                self.blocked = False
                return
            for why in bad:
                log.warning("--replicas-file %s %s: skipped", self.path, why)
            self.listed, self.refused = urls, set()
        self.apply(self.listed)

    def parse(self, text: str) -> dict[str, str | None]:
        """URL -> its name (None: none given) of each line that holds one (in file order);
        each line that holds none logged."""
        urls, bad = self._read(text)
        for why in bad:
            log.warning("--replicas-file %s %s: skipped", self.path, why)
        return urls

    @staticmethod
    def _read(text: str) -> tuple[dict[str, str | None], list[str]]:
        """(URL -> its name of each line that holds one, in file order, a URL listed twice
        named by its last line; "line N: why" of each line that holds none)."""
        urls: dict[str, str | None] = {}
        bad = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            try:
                url, name = replica_spec(line)
            except ValueError as exc:
                bad.append(f"line {n}: {exc}")
                continue
            urls[url] = name
        return urls, bad

    def apply(self, urls: dict[str, str | None]) -> None:
        """The file's replicas as ``urls`` (URL -> name, file order) says, taken whole
        (NOTE(snapshot))."""
        # labels held by members the file neither brought in nor lists: theirs to keep
        outside = {r.name for r in self.replicas.replicas
                   if r.url not in urls and r.url not in self.from_file}
        wanted: dict[str, str | None] = {}
        taken: dict[str, str] = {}  # label -> the URL of the first line giving it
        blocked = False
        for url, name in urls.items():
            label = name or default_name(url)
            if label in taken or label in outside:
                blocked |= label not in taken
                self._refuse(url, label, taken.get(label))
                continue
            taken[label] = url
            wanted[url] = name
        for url in sorted(self.from_file - wanted.keys()):  # another's line refused: it stays
            self.replicas.remove(url)
        self.replicas.assign(wanted)
        self.from_file, self.blocked = set(wanted), blocked

    def _refuse(self, url: str, label: str, first: str | None) -> None:
        """Log, once per file read, that ``url``'s line is skipped for its ``label``."""
        if url in self.refused:
            return
        self.refused.add(url)
        holder = (f"given to {first} by an earlier line" if first is not None else
                  "held by a replica from --replica or the admin API")
        log.warning("--replicas-file %s: %s skipped: its name %r is %s; give each replica "
                    "its own name (NAME=URL)", self.path, url, label, holder)
