"""The slowloris client of ``stress http --slowloris N`` (stress/http/slowloris.py): against a server
with a header timeout every connection is closed and the figures pass; against one with its
timeouts off they stay open past the limit and the run's verdict fails (the check is not
vacuous)."""

from __future__ import annotations

from stress import cli
from stress.report import StressReport
from stress.http.slowloris import SLOWLORIS_MARGIN, SLOWLORIS_MUST_BE_ZERO, flag_values, \
    limit_for_serve_args, loris_limit, run_slowloris, slowloris_figures


def verdict(figures: dict) -> StressReport:
    rep = StressReport("http", {})
    for k, v in figures.items():
        rep.set(k, v, must_be_zero=k in SLOWLORIS_MUST_BE_ZERO)
    return rep


async def test_closed_by_a_server_with_a_header_timeout(make_server):
    with make_server(header_timeout=1.0, keep_alive_timeout=0) as srv:
        limit = loris_limit(1.0, 0)
        figures = slowloris_figures(await run_slowloris(srv.url, 4, limit=limit,
                                                        interval=0.25), limit)
        assert figures["slowloris_closed_by_server"] == 4
        assert figures["slowloris_open_past_limit"] == 0
        assert 0.9 <= figures["slowloris_lifetime_p50_s"] <= figures["slowloris_lifetime_max_s"]
        assert figures["slowloris_lifetime_max_s"] < limit
        assert verdict(figures).ok
        rejected = srv.run_on_loop(lambda: srv.limiter.rejected["header_timeout"])
        assert rejected == 4


async def test_a_server_without_timeouts_fails_the_run(make_server):
    with make_server(header_timeout=0, keep_alive_timeout=0) as srv:
        figures = slowloris_figures(await run_slowloris(srv.url, 3, limit=1.5,
                                                        interval=0.25), 1.5)
        assert figures["slowloris_open_past_limit"] == 3
        assert figures["slowloris_closed_by_server"] == 0
        rep = verdict(figures)
        assert not rep.ok and any("slowloris_open_past_limit" in f for f in rep.failures())


def test_limit_and_flags():
    assert loris_limit(10, 15) == 10 + SLOWLORIS_MARGIN
    assert loris_limit(0, 15) == 15 + SLOWLORIS_MARGIN  # aiohttp's keep-alive timer closes it
    assert loris_limit(0, 0) == SLOWLORIS_MARGIN  # no timer: any loris outlives the limit
    assert flag_values(("--header-timeout", "2", "--keep-alive-timeout=4", "--no-x")) == {
        "--header-timeout": "2", "--keep-alive-timeout": "4"}
    assert limit_for_serve_args(("--header-timeout", "2")) == 2 + SLOWLORIS_MARGIN
    assert limit_for_serve_args(()) == 10 + SLOWLORIS_MARGIN  # kvpool serve's defaults
    args = cli.build_parser().parse_args(["http", "--slowloris", "50"])
    assert args.slowloris == 50
    assert cli.build_parser().parse_args(["http"]).slowloris == 0
    assert cli.main(["http", "--slowloris", "-1", "--url", "http://127.0.0.1:1",
                     "--quiet"]) == 2
