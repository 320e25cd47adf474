"""deploy/: the Grafana dashboard and the Prometheus config are valid, and every metric the
dashboard queries is one kvpool exports: the server's (METRIC_NAMES, the HTTP edge's, a live
/metrics scrape), the remote tier's (kvpool.metrics.remote), the router's (a live router's
/metrics in front of the live server) and the endpoint picker's (a live picker's metrics port
in front of it)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest

from kvpool.epp.cli import picking
from kvpool.epp.listener import Server
from kvpool.epp.metrics import DEFAULT_METRICS_PORT, MetricsPort, TransportCollector
from kvpool.epp.picker import Picker
from kvpool.events.config import KVEventsConfig
from kvpool.events.publisher import EventPublisher
from kvpool.metrics import METRIC_NAMES
from kvpool.metrics.http_series import HTTP_METRIC_NAMES
from kvpool.metrics.remote import REMOTE_METRIC_NAMES, RemoteMetrics
from kvpool.metrics.request_metrics import REQUEST_METRIC_NAMES
from kvpool.remote import Namespace, ValueCodec
from kvpool.remote.memory_tier import InMemoryTier
from kvpool.router.kv_routing import EventRouting
from kvpool.router.proxy import Router
from kvpool.server.app import METRICS_KEY
from kvpool.server.connections import ConnectionLimiter
from kvpool.router.replicas import ReplicaSet
from tests.server.grafana import DEPLOY, dashboard_exprs, load_dashboard, plain
from tests.server.helpers import parse_metrics

PROMETHEUS_YML = DEPLOY / "prometheus.yml"

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
             "or", "unless", "offset", "Inf", "NaN", "inf", "nan"}
_HIST_SUFFIXES = ("_bucket", "_sum", "_count")
# The HTTP edge's series (kvpool.server.connections; in every live scrape below)
EDGE_NAMES = ("kvpool_http_connections", "kvpool_http_connections_rejected_total")


def registry_names(registry: CollectorRegistry) -> set[str]:
    """Family names a registry exports, as METRIC_NAMES spells them (counters with _total)."""
    out = set()
    for fam in registry.collect():
        for sample in fam.samples:
            if sample.name.endswith("_created"):
                continue
            out.add(fam.name if fam.type == "histogram" else sample.name)
    return out


def router_names() -> set[str]:
    """A router's families, its KV-event follower's among them (``--kv-events``)."""
    replicas = ReplicaSet(["http://127.0.0.1:9"])
    kv = EventRouting(replicas)
    try:
        return registry_names(Router(replicas, kv_events=kv).metrics.registry)
    finally:
        asyncio.run(kv.close())


def publisher_names() -> set[str]:
    """The KV-event publisher's families (``serve --kv-events-config``), on a loopback port."""
    pub = EventPublisher(KVEventsConfig(enable_kv_cache_events=True,
                                        endpoint="tcp://127.0.0.1:*"))
    try:
        return {name for name, *_ in pub.families()}
    finally:
        pub.close()


def epp_names() -> set[str]:
    """The picker's own families (its metrics port serves them beside the router's)."""
    registry = CollectorRegistry()
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"])))
    registry.register(TransportCollector(picker, Server(picker.pick_body, 1 << 20)))
    return registry_names(registry)


def memory_tier() -> InMemoryTier:
    return InMemoryTier(ValueCodec(Namespace(model_id="tiny", weights="w", dtype="float32",
                                             block_size=16, layers=2, kv_heads=2, head_dim=16)))


def remote_names() -> set[str]:
    return registry_names(RemoteMetrics(memory_tier().stats).registry)


def exported() -> set[str]:
    return set(METRIC_NAMES) | set(REQUEST_METRIC_NAMES) | set(EDGE_NAMES) | \
        set(HTTP_METRIC_NAMES) | remote_names() \
        | router_names() | epp_names() | publisher_names()


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (a lexer-level parse: strings, label matchers,
    ranges and grouping label lists are removed; functions are words followed by '(')."""
    expr = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r" \1 ",
                  expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if m.start() and (expr[m.start() - 1].isdigit() or expr[m.start() - 1] == "."):
            continue  # the exponent of 1e-9
        after = expr[m.end():].lstrip()
        if m.group() in _KEYWORDS or after.startswith("(") or re.match(r"(by|without)\b", after):
            continue  # a keyword, a function call or an aggregation: sum by (le) (...)
        names.add(m.group())
    return names


def family(name: str, names: set[str]) -> str:
    """The exported family (in ``names``) a sample name belongs to."""
    if name in names:
        return name
    for suffix in _HIST_SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in names:
            return name.removesuffix(suffix)
    raise AssertionError(f"{name} is not exported by kvpool (server, remote tier or router)")


def test_metric_name_extraction():
    e = ('histogram_quantile(0.99, sum by (le, tier) (rate(kvpool_x_bucket{a="b{c}"}[5m]))) '
         '/ on(instance) group_left clamp_min(kvpool_y_total offset 5m, 1e-9) + kvpool_z')
    assert metric_names(e) == {"kvpool_x_bucket", "kvpool_y_total", "kvpool_z"}


def test_dashboard_shape():
    dash = load_dashboard()
    assert dash["schemaVersion"] >= 36 and dash["title"] and dash["uid"]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        assert p["targets"], p["title"]
        pos = p["gridPos"]
        assert pos["x"] + pos["w"] <= 24 and pos["h"] > 0
    titles = " | ".join(p["title"].lower() for p in panels)
    for topic in ("usage", "free blocks", "fragmentation", "swap", "preemption", "hit rate",
                  "requests by state", "first token", "inter-token", "end-to-end", "step time",
                  "evictions", "invariant", "remote tier", "breaker", "http connections",
                  "router", "endpoint picker", "admission refusals", "kv events"):
        assert topic in titles, f"no panel about {topic!r}"


def test_remote_and_router_names_are_what_their_registries_export():
    assert remote_names() == set(REMOTE_METRIC_NAMES)
    assert {"kvpool_router_decisions_total", "kvpool_router_predicted_hit_tokens_total",
            "kvpool_router_cached_tokens_total", "kvpool_router_healthy_replicas"} <= \
        router_names()
    assert {"kvpool_router_kv_events_total", "kvpool_router_kv_index_blocks",
            "kvpool_router_lookup_fallbacks_total"} <= router_names()
    assert {"kvpool_kv_events_published_total", "kvpool_kv_events_dropped_total"} <= \
        publisher_names()
    assert {"kvpool_epp_picks_total", "kvpool_epp_connections_refused_total",
            "kvpool_epp_connections_cut_total", "kvpool_epp_held_bytes"} <= epp_names()


def test_every_exported_metric_is_on_the_dashboard_and_nothing_else():
    names = exported()
    used = {family(n, names) for e in dashboard_exprs(load_dashboard())
            for n in metric_names(plain(e))}
    missing = names - used
    assert not missing, f"metrics exported but not on the dashboard: {sorted(missing)}"


def targets() -> list[tuple[dict, dict]]:
    """(panel, target) for every target of the dashboard."""
    panels = load_dashboard()["panels"]
    return [(p, t) for p in panels for t in p.get("targets", [])]


def clamp_floors(expr: str) -> list[str]:
    """The floor (last argument) of every clamp_min(...) in ``expr``."""
    floors = []
    for m in re.finditer(r"clamp_min\(", expr):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        floors.append(expr[m.end():i - 1].rsplit(",", 1)[1].strip())
    return floors


def test_ratios_floor_their_denominator_near_zero():
    # a floor of 1 (per second) under-read a hit rate whenever fewer than 1 token/s was
    # looked up: the ratio of the two rates is what vLLM's dashboards plot
    for p, t in targets():
        for floor in clamp_floors(t["expr"]):
            assert float(floor) <= 1e-9, (p["title"], t["expr"])


def test_per_second_panels_plot_rates():
    # increase() over $__rate_interval is a count per window that scales with the zoom
    for p, t in targets():
        if p["fieldConfig"]["defaults"].get("unit") in ("ops", "reqps", "Bps", "binBps"):
            assert "increase(" not in t["expr"], (p["title"], t["expr"])


def test_series_kept_per_instance_are_told_apart():
    for p, t in targets():
        expr = plain(t["expr"])
        by = re.match(r"\w+ by \(([^)]*)\)", expr)
        if re.fullmatch(r"[\w:]+\{[^}]*\}", expr) or (by and "instance" in by.group(1)):
            assert "{{instance}}" in t.get("legendFormat", ""), (p["title"], expr)


def test_free_blocks_panel_plots_what_is_ready_to_allocate():
    panel = next(p for p, _ in targets() if p["title"].startswith("Free blocks per tier"))
    assert any("kvpool_allocatable_blocks" in t["expr"] for t in panel["targets"])


def test_latency_panels_use_histogram_buckets():
    exprs = [plain(e) for e in dashboard_exprs(load_dashboard())]
    quantiles = [e for e in exprs if "histogram_quantile" in e]
    assert len(quantiles) >= 15
    for e in quantiles:
        assert re.search(r"by \((?:[^)]*\b)?le\b", e), e
        assert all(n.endswith("_bucket") for n in metric_names(e)), e


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus "
                    "package) is not installed")
def test_promtool_parses_every_expression(tmp_path):
    exprs = [plain(e) for e in dashboard_exprs(load_dashboard())]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"kvpool:dashboard_expr_{i}", "expr": e} for i, e in enumerate(exprs)]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    out = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    out = subprocess.run(["promtool", "check", "config", str(PROMETHEUS_YML)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_prometheus_yml_scrapes_the_default_server():
    yaml = pytest.importorskip("yaml")
    cfg = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    job = jobs["kvpool"]
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert "127.0.0.1:8000" in job["static_configs"][0]["targets"]
    epp = jobs["kvpool-epp"]  # the picker's metrics port, at its default
    assert epp.get("metrics_path", "/metrics") == "/metrics"
    assert f"127.0.0.1:{DEFAULT_METRICS_PORT}" in epp["static_configs"][0]["targets"]


async def router_scrape(srv) -> dict:
    """The /metrics of a real router on loopback in front of ``srv``."""
    replicas = ReplicaSet([srv.url])  # following its KV events (it publishes none)
    router = Router(replicas, kv_events=EventRouting(replicas))
    rsrv = TestServer(router.app(), host="127.0.0.1", port=0)
    await rsrv.start_server()
    try:
        async with aiohttp.ClientSession() as s:
            await (await s.post(srv.url + "/v1/completions",
                                json={"prompt": "hello", "max_tokens": 3})).read()
            async with s.get(f"http://127.0.0.1:{rsrv.port}/metrics") as r:
                assert r.status == 200
                return parse_metrics(await r.text())
    finally:
        await rsrv.close()


async def epp_scrape(srv) -> dict:
    """The metrics port of a real picker (gRPC and metrics on loopback) over ``srv``, after
    one pick."""
    picker = Picker(Router(ReplicaSet([srv.url])))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, metrics=metrics), aiohttp.ClientSession() as s:
        assert (await picker.pick_body("/v1/models", b"", [], "GET")).endpoint is not None
        async with s.get(metrics.url + "/metrics") as r:
            assert r.status == 200
            return parse_metrics(await r.text())


async def test_dashboard_metrics_are_in_a_live_scrape(srv):
    """Server series in the server's /metrics; router series in the /metrics of a real router
    on loopback in front of that server; picker series on a real picker's metrics port, which
    serves the router's series too; remote-tier series in a RemoteMetrics exposition (the
    server exports it once it runs with --remote-url)."""
    # the HTTP edge's families, attached the way serve() attaches them (the in-process
    # fixture server has no connection limiter of its own)
    srv.app[METRICS_KEY].add_source(ConnectionLimiter(8).families)
    from_router = await router_scrape(srv)
    from_epp = await epp_scrape(srv)
    follower = {"kvpool_router_kv_events_total", "kvpool_router_kv_index_blocks",
                "kvpool_router_lookup_fallbacks_total"}  # the picker's router follows none
    assert set(from_router) - follower <= set(from_epp)  # the picker's Router, its port
    async with aiohttp.ClientSession() as s, s.get(srv.url + "/metrics") as r:
        text = await r.text()
    from_server = parse_metrics(text)
    # a labelled counter with no series yet (no connection rejected so far) is still
    # declared by its # TYPE line; its family name stands for it
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            if kind == "counter" and not name.endswith("_total"):
                name += "_total"
            from_server.setdefault(name, {})
    remote = RemoteMetrics(memory_tier().stats)
    for op in ("probe", "get", "put"):
        remote.observe(op, 0.001)
    from_remote = parse_metrics(generate_latest(remote.registry).decode())
    published = publisher_names()  # a replica's with --kv-events-config
    for expr in dashboard_exprs(load_dashboard()):
        for name in metric_names(plain(expr)):
            where = (published if name.startswith("kvpool_kv_events_") else
                     from_router if name.startswith("kvpool_router_") else
                     from_epp if name.startswith("kvpool_epp_") else
                     from_remote if name.startswith("kvpool_remote_") else from_server)
            assert name in where, f"{name} (in {expr!r}) is not exported"
