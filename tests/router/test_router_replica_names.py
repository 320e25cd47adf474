"""The router's /metrics names each replica by a label, never by its URL (replicas.py
NOTE(replica-series)): the NAME of ``--replica NAME=URL`` (a replicas-file line, the admin
API's "name"), else HOST:PORT. /metrics answers anyone who reaches the router, while /health
lists the URLs only to its credentials (proxy.py NOTE(health-view)). Before, every
per-replica series (and the KV-event ones) was labelled with the replica's whole URL, so
whatever it carried (a user part with a password, a query with a token) was on /metrics.

Replicas are real aiohttp servers on 127.0.0.1; the router is built from its flags
(cli.build_router) and served as ``kvpool router`` serves it."""

from __future__ import annotations

import argparse
import logging

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.cli import add_arguments, build_router
from kvpool.router.membership import ADMIN_PATH, Membership, replica_spec
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served, served
from tests.router.kv_events import until

SECRET = "pw-7f3a9c"
QUERY_TOKEN = "qt-51e2b8"
ADMIN = "names-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
PER_REPLICA = ("kvpool_router_replica_load", "kvpool_router_replica_healthy",
               "kvpool_router_replica_in_flight", "kvpool_router_kv_events_total",
               "kvpool_router_kv_index_blocks")


def replica() -> web.Application:
    async def health(_request):
        return web.json_response({"status": "ok", "num_running": 1, "num_waiting": 0})

    app = web.Application()
    app.router.add_get("/health", health)
    return app


def labels(text: str) -> set[str]:
    """The ``replica`` label values of the per-replica series in a /metrics text."""
    out = set()
    for line in text.splitlines():
        if line.startswith(PER_REPLICA) and 'replica="' in line:
            out.add(line.split('replica="', 1)[1].split('"', 1)[0])
    return out


async def scrape(url: str, path: str = "/metrics") -> str:
    async with aiohttp.ClientSession() as s, s.get(url + path) as resp:
        assert resp.status == 200
        return await resp.text()


async def test_series_are_labelled_by_name_or_host_port_never_the_url():
    """``--replica edge-a=URL`` is "edge-a" on every per-replica series (the KV-event ones
    too), its host and port nowhere on /metrics; a replica given no name is HOST:PORT."""
    async with apps_served(replica(), replica()) as (a, b):
        args = add_arguments(argparse.ArgumentParser()).parse_args(
            ["--replica", f"edge-a={a}", "--replica", b, "--kv-events"])
        async with served(r := build_router(args)) as url:
            await until(lambda: all(x.healthy for x in r.replicas.replicas), "both healthy")
            text = await scrape(url)
    assert labels(text) == {"edge-a", b.removeprefix("http://")}
    assert [s for s in PER_REPLICA if f"{s}{{" not in text] == []
    assert a.removeprefix("http://") not in text and "http://" not in text


async def test_a_url_with_credentials_or_a_query_never_reaches_metrics():
    """A ReplicaSet given such a URL directly (no flag refused it) is labelled HOST:PORT:
    neither the password nor the query's token is on /metrics."""
    async with apps_served(replica()) as (rep,):
        host_port = rep.removeprefix("http://")
        odd = f"http://user:{SECRET}@{host_port}/?token={QUERY_TOKEN}"
        async with served(Router(ReplicaSet([odd], interval=0.05))) as url:
            text = await scrape(url)
    assert labels(text) == {host_port}
    assert SECRET not in text and QUERY_TOKEN not in text and "user" not in text


@pytest.mark.parametrize("bad", [
    f"http://user:{SECRET}@127.0.0.1:9/?token={QUERY_TOKEN}",
    f"http://127.0.0.1:9/?token={QUERY_TOKEN}", f"http://127.0.0.1:9/#{QUERY_TOKEN}",
    f"n=http://127.0.0.1:9?token={QUERY_TOKEN}", f"user:{SECRET}=x@127.0.0.1:9"])
async def test_every_way_in_refuses_a_query_or_user_part_unshown(bad, caplog):
    """The flag, a replicas-file line and the admin API refuse it, and none of the refusals
    (the flag's error, the log line, the 400 body) shows the password or the token."""
    with pytest.raises(ValueError) as refused:
        replica_spec(bad)
    assert SECRET not in str(refused.value) and QUERY_TOKEN not in str(refused.value)
    membership = Membership(ReplicaSet([]), replicas_file="/nonexistent")
    with caplog.at_level(logging.WARNING, logger="kvpool.router"):
        taken = membership.parse(bad)  # ('#' starts a comment in the file: the URL before)
    assert taken in ({}, {"http://127.0.0.1:9": None})
    assert SECRET not in caplog.text and QUERY_TOKEN not in caplog.text
    replicas = ReplicaSet([], interval=0.5)
    router = Router(replicas, membership=Membership(replicas, admin_token=ADMIN))
    async with served(router) as url, aiohttp.ClientSession() as s:
        async with s.post(url + ADMIN_PATH, json={"url": bad}, headers=AUTH) as resp:
            text = await resp.text()
            assert resp.status == 400 and SECRET not in text and QUERY_TOKEN not in text


async def test_names_from_the_admin_api_and_the_replicas_file(tmp_path):
    """A name given by the admin API or a ``NAME=URL`` file line labels the series; a name
    another replica has is refused (one series per replica), by the API with a 400."""
    async with apps_served(replica(), replica(), replica()) as (a, b, c):
        path = tmp_path / "replicas.txt"
        path.write_text(f"pod-b={b}\n")
        replicas = ReplicaSet([], interval=0.05)
        router = Router(replicas, membership=Membership(
            replicas, admin_token=ADMIN, replicas_file=str(path), poll=0.05))
        async with served(router) as url, aiohttp.ClientSession() as s:
            async with s.post(url + ADMIN_PATH, json={"url": a, "name": "pod-a"},
                              headers=AUTH) as resp:
                assert resp.status == 201 and (await resp.json())["name"] == "pod-a"
            async with s.post(url + ADMIN_PATH, json={"url": c, "name": "pod-b"},
                              headers=AUTH) as resp:
                body = await resp.json()
                assert resp.status == 400 and body["error"]["code"] == "invalid_name", body
            async with s.get(url + ADMIN_PATH, headers=AUTH) as resp:
                listed = {x["url"]: x["name"] for x in (await resp.json())["replicas"]}
            assert listed == {b: "pod-b", a: "pod-a"}
            await until(lambda: all(x.healthy for x in replicas.replicas), "both healthy")
            assert labels(await scrape(url)) == {"pod-a", "pod-b"}


def test_the_flags_refuse_two_replicas_of_one_name():
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["--replica", "x=http://127.0.0.1:9", "--replica", "x=http://127.0.0.1:10"])
    with pytest.raises(ValueError, match="another replica's"):
        build_router(args)
