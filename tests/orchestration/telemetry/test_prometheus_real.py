"""The Grafana dashboard and the alert rules, proven against a real Prometheus.

A real ``prometheus`` (the Debian package; installed here if missing and we may) scrapes
a loopback ``/metrics`` endpoint served from a fresh registry while a workload that
exercises every layer and a budget runs twice. The dashboard's ``job`` and ``instance``
variables are resolved as Grafana does (label values of ``orchestration_runs_total``),
then every panel query of config/grafana/dagwright.json, with those values, and every
alert expression of config/prometheus/alerts.yml is evaluated through Prometheus' HTTP
API: a query that errors or returns no series fails the test, and so does a panel that
still shows data for a job that does not exist. ``promtool`` checks our exposition
(``check metrics``) and the rules, and unit-tests that the important alerts fire.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import CollectorRegistry

from orchestration import Catalog
from orchestration.demo.tools import DemoTools
from orchestration.telemetry import Metrics, serve_metrics
from tests import ROOT
from tests.orchestration.telemetry.test_observability import (
    run_auth_failure,
    run_budget_stop,
    run_circuit_trip,
    run_every_layer,
    run_plan_cache_hit,
)

DASHBOARD = ROOT / "config" / "grafana" / "dagwright.json"
ALERTS = ROOT / "config" / "prometheus" / "alerts.yml"
EXAMPLE_CONFIG = ROOT / "config" / "prometheus" / "prometheus.yml"


# --------------------------------------------------------------------------- helpers


def dashboard_variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in json.loads(DASHBOARD.read_text())["templating"]["list"]}


def with_variables(expr: str, job: str, instance: str) -> str:
    """``expr`` as Grafana sends it for one job and instance."""
    return expr.replace("$job", job).replace("$instance", instance)


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expr) of every target of every panel, rows included."""
    def walk(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in panels:
            yield panel
            yield from walk(panel.get("panels", []))

    data = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in walk(data["panels"]) for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def with_bool(expr: str) -> str:
    """``expr`` with every comparison made a ``bool`` comparison.

    An alert expression returns nothing while it does not fire; with ``bool`` it returns
    0/1 for every series it looks at, which shows that the metrics it needs exist.
    Label matchers (inside braces) and strings are left alone.
    """
    out: list[str] = []
    depth, quote, i = 0, "", 0
    while i < len(expr):
        c = expr[i]
        if quote:
            if c == quote and expr[i - 1] != "\\":
                quote = ""
        elif c in "\"'`":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0 and c in "=!<>":
            op = expr[i:i + 2] if expr[i:i + 2] in ("==", "!=", ">=", "<=") else c
            if op in ("==", "!=", ">=", "<=", ">", "<"):
                out.append(f"{op} bool")
                i += len(op)
                continue
        out.append(c)
        i += 1
    return "".join(out)


def test_with_bool_only_touches_comparisons() -> None:
    assert with_bool('up{job="x", a!="b"} == 0') == 'up{job="x", a!="b"} == bool 0'
    assert with_bool("a / b < 0.3 and c > 5") == "a / b < bool 0.3 and c > bool 5"


def find_or_install(binary: str) -> str | None:
    """The binary's path; installs the Debian package once when missing and we are root."""
    found = shutil.which(binary)
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=300,
                       capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "prometheus"], check=True, env=env,
                       timeout=600, capture_output=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return shutil.which(binary)


@pytest.fixture(scope="module")
def binaries() -> tuple[str, str]:
    prometheus, promtool = find_or_install("prometheus"), find_or_install("promtool")
    if prometheus is None or promtool is None:
        pytest.skip("!!! REAL PROMETHEUS TEST SKIPPED: the 'prometheus' binary is not installed and "
                    "could not be installed (apt-get install prometheus needs root and network). "
                    "The dashboard and alert queries were NOT checked. !!!")
    return prometheus, promtool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Prometheus:
    url: str
    log: Path

    def query(self, expr: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body: dict[str, Any] = response.json()
        return body

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, what: str, check: Any, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise AssertionError(f"Prometheus: timed out waiting for {what}\n{self.log.read_text()[-3000:]}")


@pytest.fixture
def metrics_endpoint(registry: CollectorRegistry) -> Iterator[str]:
    """``registry`` served on loopback: the URL of its ``/metrics``."""
    server = serve_metrics(0, registry, addr="127.0.0.1")
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def prometheus(binaries: tuple[str, str], tmp_path: Path,
               metrics_endpoint: str) -> Iterator[Prometheus]:
    """A real Prometheus scraping ``metrics_endpoint`` every second, stopped afterwards."""
    target = metrics_endpoint.removeprefix("http://").removesuffix("/metrics")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": "dagwright",
                            "static_configs": [{"targets": [target]}]}],
    }))
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binaries[0], f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    server = Prometheus(f"http://127.0.0.1:{port}", log)
    try:
        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"prometheus exited with {process.returncode}:\n{log.read_text()}")
            try:
                return httpx.get(f"{server.url}/-/ready", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        server.wait_for("readiness", ready, timeout_s=30)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --------------------------------------------------------------------------- the test


@pytest.mark.prometheus
def test_every_panel_query_and_alert_expression_returns_data_from_a_real_prometheus(
    prometheus: Prometheus, demo_tools: DemoTools, demo_catalog: Catalog,
    registry: CollectorRegistry, metrics_endpoint: str, binaries: tuple[str, str],
) -> None:
    started = time.monotonic()
    # two rounds with a scrape between them, so every counter increases between samples
    for round_number in (1, 2):
        run_every_layer(demo_tools, demo_catalog, registry)
        run_auth_failure(demo_tools, demo_catalog, registry)
        run_budget_stop(demo_tools, demo_catalog, registry)
        run_circuit_trip(demo_tools, demo_catalog, registry)
        run_plan_cache_hit(demo_tools, demo_catalog, registry)
        runs = 7 * round_number
        prometheus.wait_for(f"round {round_number} scraped",
                            lambda runs=runs: prometheus.scalar("sum(orchestration_runs_total)") == runs)
    # each round was seen by its own scrape: at least two scrapes with data
    assert (prometheus.scalar('count_over_time(up{job="dagwright"}[5m])') or 0) >= 2
    scraped_s = time.monotonic() - started

    # what promtool says of our exposition, with every metric family present
    exposition = httpx.get(metrics_endpoint, timeout=5).text
    lint = subprocess.run([binaries[1], "check", "metrics"], input=exposition,
                          capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    # the dashboard's variables, resolved as Grafana resolves label_values(metric, label)
    variables = dashboard_variables()
    assert variables["job"]["query"]["query"] == "label_values(orchestration_runs_total, job)"
    jobs = httpx.get(f"{prometheus.url}/api/v1/label/job/values",
                     params={"match[]": "orchestration_runs_total"}, timeout=5).json()["data"]
    instances = httpx.get(f"{prometheus.url}/api/v1/label/instance/values",
                          params={"match[]": 'orchestration_runs_total{job=~"dagwright"}'},
                          timeout=5).json()["data"]
    assert jobs == ["dagwright"]
    assert instances == [metrics_endpoint.removeprefix("http://").removesuffix("/metrics")]

    problems: list[str] = []

    def check(label: str, expr: str) -> None:
        body = prometheus.query(expr)
        if body.get("status") != "success":
            problems.append(f"{label}: error {body.get('errorType')}: {body.get('error')}\n  {expr}")
            return
        result = body["data"]["result"]
        if not result:
            problems.append(f"{label}: no series\n  {expr}")
        elif not any(math.isfinite(float(r["value"][1])) for r in result):
            problems.append(f"{label}: only NaN/Inf values {result}\n  {expr}")

    queries = dashboard_queries()
    assert len(queries) >= 25
    for title, expr in queries:
        check(f"panel {title!r}", with_variables(expr, jobs[0], instances[0]))
        other = prometheus.query(with_variables(expr, "another-service", ".*"))
        if other.get("status") == "success" and any(
                math.isfinite(float(r["value"][1])) and float(r["value"][1]) != 0
                for r in other["data"]["result"]):
            problems.append(f"panel {title!r} shows data for another job: {expr}")
    rules = alert_rules()
    for rule in rules:
        boolean = with_bool(rule["expr"])
        assert boolean != rule["expr"], rule["alert"]
        raw = prometheus.query(rule["expr"])
        if raw.get("status") != "success":
            problems.append(f"alert {rule['alert']}: error {raw.get('error')}")
        check(f"alert {rule['alert']} (as bool)", boolean)
    assert not problems, "\n".join(problems)

    # Prometheus itself loaded and evaluated every rule without error
    def rules_evaluated() -> bool:
        groups = httpx.get(f"{prometheus.url}/api/v1/rules", timeout=5).json()["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        return len(loaded) == len(rules) and all(
            r["health"] == "ok" and not r["lastEvaluation"].startswith("0001") for r in loaded)

    prometheus.wait_for("every rule evaluated healthy", rules_evaluated)
    # the workload's auth failure makes the auth alert fire for real
    alerts = httpx.get(f"{prometheus.url}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    assert {(a["labels"]["alertname"], a["labels"].get("tool")) for a in alerts} >= {
        ("DagwrightToolAuthErrors", "stocks")}
    print(f"\nreal Prometheus: workload scraped after {scraped_s:.1f}s; {len(queries)} panel "
          f"queries and {len(rules)} alert rules checked after {time.monotonic() - started:.1f}s")


# --------------------------------------------------------------------------- promtool


@pytest.mark.prometheus
def test_promtool_accepts_the_rules_and_the_example_config(binaries: tuple[str, str]) -> None:
    promtool = binaries[1]
    rules = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True,
                           text=True, timeout=60)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = subprocess.run([promtool, "check", "config", str(EXAMPLE_CONFIG)], capture_output=True,
                            text=True, timeout=60, cwd=EXAMPLE_CONFIG.parent)
    assert config.returncode == 0, config.stdout + config.stderr


def _annotations(alert: str, summary: str) -> dict[str, str]:
    rule = next(r for r in alert_rules() if r["alert"] == alert)
    return {"summary": summary, "description": rule["annotations"]["description"]}


@pytest.mark.prometheus
def test_promtool_unit_tests_show_the_alerts_fire_when_they_should(
    binaries: tuple[str, str], tmp_path: Path,
) -> None:
    convert = 'tool="currency",capability="convert"'
    collapsing = "DagwrightSemanticRetrySuccessCollapsing"
    failing = "DagwrightRunFailureRatioHigh"
    tests = [
        {   # layer 4 succeeds 1 time in 10: fires once it has lasted 15 minutes
            "interval": "1m",
            "input_series": [
                {"series": f"orchestration_semantic_retry_attempts_total{{{convert}}}", "values": "0+10x60"},
                {"series": f"orchestration_semantic_retry_success_total{{{convert}}}", "values": "0+1x60"},
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": collapsing, "exp_alerts": []},
                {"eval_time": "50m", "alertname": collapsing, "exp_alerts": [{
                    "exp_labels": {"severity": "warning"},
                    "exp_annotations": _annotations(
                        collapsing, "Layer 4 semantic retry succeeds only 10% of the time")}]},
            ],
        },
        {   # 9 in 10 succeed: quiet
            "interval": "1m",
            "input_series": [
                {"series": f"orchestration_semantic_retry_attempts_total{{{convert}}}", "values": "0+10x60"},
                {"series": f"orchestration_semantic_retry_success_total{{{convert}}}", "values": "0+9x60"},
            ],
            "alert_rule_test": [{"eval_time": "50m", "alertname": collapsing, "exp_alerts": []}],
        },
        {   # every attempt fails and the success counter never appeared: still fires
            "interval": "1m",
            "input_series": [
                {"series": f"orchestration_semantic_retry_attempts_total{{{convert}}}", "values": "0+10x60"},
            ],
            "alert_rule_test": [{"eval_time": "50m", "alertname": collapsing, "exp_alerts": [{
                "exp_labels": {"severity": "warning"},
                "exp_annotations": _annotations(
                    collapsing, "Layer 4 semantic retry succeeds only 0% of the time")}]}],
        },
        {   # half the runs fail
            "interval": "1m",
            "input_series": [
                {"series": 'orchestration_runs_total{status="failed"}', "values": "0+5x60"},
                {"series": 'orchestration_runs_total{status="succeeded"}', "values": "0+5x60"},
                {"series": 'orchestration_tool_errors_total{tool="stocks",capability="lookup",'
                           'category="AUTH_ERROR"}', "values": "0 0 1+0x58"},
            ],
            "alert_rule_test": [
                {"eval_time": "40m", "alertname": failing, "exp_alerts": [{
                    "exp_labels": {"severity": "critical"},
                    "exp_annotations": _annotations(failing, "50% of dagwright runs fail")}]},
                {"eval_time": "5m", "alertname": "DagwrightToolAuthErrors", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "tool": "stocks"},
                    "exp_annotations": _annotations(
                        "DagwrightToolAuthErrors", "Tool stocks rejects dagwright's credentials")}]},
            ],
        },
        {   # no failed run at all (the series does not even exist): quiet, not "no data"
            "interval": "1m",
            "input_series": [{"series": 'orchestration_runs_total{status="succeeded"}',
                              "values": "0+5x60"}],
            "alert_rule_test": [{"eval_time": "40m", "alertname": failing, "exp_alerts": []}],
        },
        {   # a breaker open (then probing, then open again) for ten minutes: fires;
            # one that closed after two minutes: quiet
            "interval": "1m",
            "input_series": [
                {"series": 'orchestration_circuit_state{tool="stocks"}',
                 "values": "0 1 1 1 2 1 1 1 2 1 1 1 1"},
                {"series": 'orchestration_circuit_state{tool="weather"}',
                 "values": "0 1 1 0 0 0 0 0 0 0 0 0 0"},
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "DagwrightCircuitOpen", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "DagwrightCircuitOpen", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "tool": "stocks"},
                    "exp_annotations": _annotations(
                        "DagwrightCircuitOpen",
                        "The circuit breaker of tool stocks has not closed for 5 minutes")}]},
            ],
        },
    ]
    spec = tmp_path / "alerts_test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(ALERTS)], "evaluation_interval": "1m",
                                    "tests": tests}, sort_keys=False))
    run = subprocess.run([binaries[1], "test", "rules", str(spec)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


# --------------------------------------------------------------------------- dashboard shape


def test_dashboard_is_importable_and_covers_every_metric() -> None:
    data = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource"
    assert variables["DS_PROMETHEUS"]["query"] == "prometheus"
    for name in ("job", "instance"):  # several services in one Prometheus are kept apart
        variable = variables[name]
        assert variable["type"] == "query" and variable["multi"] and variable["includeAll"]
        assert variable["allValue"] == ".*"
        assert variable["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    assert "{job=~\"$job\"}" in variables["instance"]["query"]["query"]
    panels = [p for p in data["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in data["panels"]}) == len(data["panels"])
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, panel["title"]
        assert panel["targets"] and all(t["datasource"] == panel["datasource"] for t in panel["targets"])
    titles = {p["title"] for p in panels}
    assert {"Runs/s by status", "Run latency p50 / p95 / p99", "Step error rate by category",
            "Coercions/s by capability", "Validation feedback success rate",
            "Semantic retry success rate", "Semantic retry LLM latency p95",
            "Runs stopped by a budget/s", "LLM cost/s by purpose",
            "Independent-step semantic retries/s", "Transient overrides/s",
            "Resilience retries/s by category", "LLM tokens/s by purpose",
            "Planner retries/s by reason"} <= titles
    exprs = "\n".join(expr for _, expr in dashboard_queries())
    for metric in _metric_families():
        assert metric in exprs, f"no panel shows {metric}"
    # every series a panel reads is narrowed to the chosen job and instance(s)
    selectors = re.findall(r"orchestration_[a-z_]+(\{[^}]*\})?", exprs)
    assert selectors and all(s.startswith('{job=~"$job", instance=~"$instance"') for s in selectors)


def _metric_families() -> list[str]:
    registry = CollectorRegistry()
    Metrics.for_registry(registry)
    return [m.name for m in registry.collect()]
