"""A replica URL with a user part (``http://user:secret@HOST:PORT``) is refused wherever it comes
in (the --replica flag, the admin API, the --replicas-file) without its password ever shown:
not in the refusal (a 400 body, the flag's error, a log line), not on /metrics or /health
(membership.py NOTE(no-userinfo)). Before, each refusal quoted the URL whole, password included:
into the router's log for a --replicas-file line, into a service's journal for the flag."""

from __future__ import annotations

import argparse
import logging

import aiohttp
import pytest

from kvpool.router.cli import add_arguments, build_router
from kvpool.router.membership import ADMIN_PATH, Membership
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import served

SECRET = "hunter2-pw"
TOKEN = "admin-token-x"
WITH_USER = [f"http://user:{SECRET}@127.0.0.1:9", f"http://u:{SECRET}@evil@127.0.0.1:9",
             f"http://u:{SECRET}/x@127.0.0.1:9", f"user:{SECRET}@127.0.0.1:9",
             f"http://user:{SECRET}@bad host:9", f"http://user:{SECRET}@127.0.0.1:0"]


def test_the_flag_refuses_a_user_part_without_showing_its_password():
    for url in WITH_USER:
        args = add_arguments(argparse.ArgumentParser()).parse_args(["--replica", url])
        with pytest.raises(ValueError) as refused:
            build_router(args)
        assert SECRET not in str(refused.value) and "***@" in str(refused.value)


def test_a_replicas_file_line_with_a_user_part_is_skipped_unshown(caplog):
    membership = Membership(ReplicaSet([]), replicas_file="/nonexistent")
    with caplog.at_level(logging.WARNING, logger="kvpool.router"):
        assert membership.parse("\n".join(WITH_USER) + "\nhttp://127.0.0.1:9\n") == {
            "http://127.0.0.1:9": None}
    assert len(caplog.records) == len(WITH_USER)
    assert SECRET not in caplog.text


async def test_the_admin_api_refuses_a_user_part_and_nothing_shows_it():
    replicas = ReplicaSet(["http://127.0.0.1:9"], interval=0.5)
    r = Router(replicas, membership=Membership(replicas, admin_token=TOKEN))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with served(r) as url, aiohttp.ClientSession() as s:
        for bad in WITH_USER:
            async with s.post(url + ADMIN_PATH, json={"url": bad}, headers=auth) as resp:
                text = await resp.text()
                assert resp.status == 400 and SECRET not in text, text
                assert (await resp.json())["error"]["code"] == "invalid_url"
        for path in ("/metrics", "/health", ADMIN_PATH):
            async with s.get(url + path, headers=auth) as resp:
                assert SECRET not in await resp.text()
    assert [x.url for x in replicas.replicas] == ["http://127.0.0.1:9"]
