"""Envoy's retry_policy num_retries held against ``--fallbacks`` (kvpool/epp/retries.py
NOTE(retry-check); docs/epp.md, "Fallback endpoints") through a real Envoy running the shipped
deploy/envoy/envoy-fallback.yaml with num_retries changed, the real picker and real aiohttp
replicas on 127.0.0.1 (tests/epp/test_epp_envoy_fallback.py's), Envoy stopped by pid.

``dead`` replicas answer the picker's first poll, then stop listening (the picker still holds
them healthy); they report no load, so the load guard lists them first. A mismatch is said
once in the picker's log, whatever the number of requests showing it; a config that matches
says nothing. Before, nothing noticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import pytest

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker
from kvpool.epp.retries import RetryCheck
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_fallback import CONFIG, cluster, post, replica
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.server.helpers import parse_metrics

COUNTED = "              include_attempt_count_in_response: true\n"


def retries(n: int) -> tuple[str, str]:
    return "num_retries: 2\n", f"num_retries: {n}\n"


@contextlib.asynccontextmanager
async def gateway(workdir, fallbacks: int, dead: int, edits=(), metrics=None, into=None):
    """``dead`` replicas then one live one behind the picker (its metrics on ``metrics``, it
    appended to ``into``) and Envoy; yields Envoy's URL and the completions the live one
    served."""
    served: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        (live,) = await stack.enter_async_context(apps_served(replica("live", 20, served)))
        doomed = contextlib.AsyncExitStack()
        urls = [*await doomed.enter_async_context(apps_served(
            *(replica(f"dead{i}", 0, served) for i in range(dead)))), live]
        picker = Picker(Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT),
                        fallbacks=fallbacks)
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0,
                                                       metrics=metrics))
        if into is not None:
            into.append(picker)
        await doomed.aclose()  # their ports refuse now; the picker still holds them healthy
        envoy = Envoy(port, workdir, (cluster(urls), *edits), config=CONFIG)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, served


def said(caplog, words: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if words in r.getMessage()]


@pytest.mark.parametrize("fallbacks, dead, num_retries, status, words", [
    # two dead listed, a third attempt past the list: round robin over the cluster
    (1, 2, 3, None, "num_retries is above --fallbacks 1"),
    # the first dead, no retry: a 503 while the list had the live replica left
    (2, 1, 0, 503, "num_retries is below --fallbacks 2"),
])
async def test_a_mismatch_is_said_once_with_the_fix(tmp_path, caplog, fallbacks, dead,
                                                    num_retries, status, words):
    caplog.set_level(logging.WARNING, "kvpool.epp")
    async with gateway(tmp_path, fallbacks, dead, (retries(num_retries),)) as (url, _), \
            aiohttp.ClientSession() as s:
        for _ in range(4):
            r = await post(s, url)
            assert status is None or r.status == status, await r.text()
    lines = said(caplog, words)
    assert len(lines) == 1 and f"set num_retries: {fallbacks}" in lines[0], lines
    assert len(said(caplog, "num_retries")) == 1  # nothing else said


async def test_a_matching_config_says_nothing(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "kvpool.epp")
    async with gateway(tmp_path, 2, 1) as (url, served), aiohttp.ClientSession() as s:
        for _ in range(4):
            assert (await post(s, url)).status == 200
    assert served == ["live"] * 4 and not said(caplog, "num_retries")


async def test_answers_without_an_attempt_count_are_said_once(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "kvpool.epp")
    async with gateway(tmp_path, 2, 1, ((COUNTED, ""),)) as (url, _), \
            aiohttp.ClientSession() as s:
        for _ in range(3):
            assert (await post(s, url)).status == 200
    lines = said(caplog, "cannot be checked")
    assert len(lines) == 1 and "include_attempt_count_in_response: true" in lines[0], lines


async def test_failovers_are_counted(tmp_path):
    """retries.py NOTE(failovers): every answer Envoy served after more than one attempt is
    counted on /metrics (kvpool_epp_failovers_total): a dead pick failed over to the live
    replica on each of 4 requests. Before, no metric moved."""
    metrics, pickers = MetricsPort("127.0.0.1", 0), []
    async with gateway(tmp_path, 2, 1, (), metrics, pickers) as (url, served), \
            aiohttp.ClientSession() as s:
        for _ in range(4):
            assert (await post(s, url)).status == 200
        async with s.get(metrics.url + "/metrics") as r:
            samples = parse_metrics(await r.text())
    assert served == ["live"] * 4 and samples["kvpool_epp_failovers_total"][()] == 4
    assert pickers[0].retries.failovers == 4


def test_failovers_are_counted_after_every_mismatch_was_said(caplog):
    """NOTE(failovers): the answers are read (``wanted``) and counted for as long as they
    carry the attempt count: after both mismatches were said, and without
    response.code_details. Before, the check stopped once both were said."""
    caplog.set_level(logging.WARNING, "kvpool.epp")
    check = RetryCheck(1)
    check.answer("3", "via_upstream")  # above the list: said
    check.answer("1", "upstream_reset_before_response_started{connection_failure}")  # below
    assert check.said == {"over", "under"} and check.wanted
    check.answer("2", None)  # no details: said, still counted
    check.answer("2", "via_upstream")
    assert check.wanted and check.failovers == 3
    check.answer(None, "via_upstream")  # no count: nothing more to read
    assert not check.wanted and check.failovers == 3


async def test_a_full_duplex_answer_route_is_said_once_uncounted(tmp_path, caplog):
    """NOTE(failovers): answers sent FULL_DUPLEX_STREAMED are not read for the check alone, so
    failovers go uncounted there; that is said once with the fix. Before, nothing was said
    and kvpool_epp_failovers_total stayed 0 through real failovers."""
    caplog.set_level(logging.WARNING, "kvpool.epp")
    duplex = ("response_body_mode: STREAMED", "response_body_mode: FULL_DUPLEX_STREAMED")
    async with gateway(tmp_path, 2, 1, (duplex,), None, pickers := []) as (url, served), \
            aiohttp.ClientSession() as s:
        for _ in range(3):
            assert (await post(s, url)).status == 200
    lines = said(caplog, "FULL_DUPLEX_STREAMED")
    assert len(lines) == 1 and "response_body_mode: STREAMED" in lines[0], lines
    assert served == ["live"] * 3 and pickers[0].retries.failovers == 0
