"""The operator kit in ``deploy/``: the image's pins, the compose file, Prometheus's config and
alert rules (checked and unit-tested by ``promtool``), and the Grafana dashboard, whose every
metric must be one the proxy exposes. No docker engine is needed: the Dockerfile is read."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from promtool import promtool

from proxy.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\bcontext_proxy_\w+")
SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def exposed_names() -> set[str]:
    """Every sample name the proxy's own metrics can expose (histograms by their series)."""
    return {f.name + suffix for f in Metrics().registry.collect()
            if f.name.startswith("context_proxy_") for suffix in SUFFIXES[f.type]}


def referenced(text: str) -> set[str]:
    return set(METRIC.findall(text))


def expressions() -> dict[str, str]:
    """Every PromQL expression of the kit: alert rules and dashboard targets, by where."""
    rules = yaml.safe_load((DEPLOY / "alerts.yml").read_text())
    found = {f"alerts.yml {rule['alert']}": rule["expr"]
             for group in rules["groups"] for rule in group["rules"]}
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            found[f"dashboard {panel['title']} {target['refId']}"] = target["expr"]
    return found


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


def compose() -> dict[str, Any]:
    parsed = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    assert isinstance(parsed, dict)
    return parsed


def test_every_metric_the_kit_uses_is_exposed() -> None:
    exposed = exposed_names()
    assert {"context_proxy_requests_total", "context_proxy_overhead_seconds_bucket",
            "context_proxy_requests_in_flight"} <= exposed
    exprs = expressions()
    assert len(exprs) > 15
    used = {name for e in exprs.values() for name in referenced(e)}
    assert {"context_proxy_compactions_total", "context_proxy_upstream_errors_total",
            "context_proxy_policy_last_reload_successful"} <= used
    text = "\n".join(p.read_text() for p in sorted(DEPLOY.iterdir()) if p.suffix in
                     (".yml", ".yaml", ".json"))
    assert sorted(referenced(text) - exposed) == []


def test_the_dashboard_shows_what_an_operator_asks_first() -> None:
    exprs = " ".join(expressions().values())
    for needed in ("context_proxy_requests_total", "histogram_quantile(0.5",
                   "histogram_quantile(0.99", "context_proxy_request_duration_seconds_bucket",
                   "context_proxy_overhead_seconds_bucket",
                   "context_proxy_received_tokens_total", "context_proxy_sent_tokens_total",
                   "context_proxy_upstream_cached_tokens_total",
                   "context_proxy_compactions_total", "context_proxy_upstream_errors_total",
                   "context_proxy_requests_in_flight"):
        assert needed in exprs, needed
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"]


def test_promtool_accepts_the_rules_and_the_config() -> None:
    rules = promtool("check", "rules", str(DEPLOY / "alerts.yml"))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = promtool("check", "config", str(DEPLOY / "prometheus.yml"))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout  # alerts.yml, found beside the config


def _alert_test(series: list[tuple[str, str]], alert: str, at: str,
                fires: list[dict[str, str]]) -> dict[str, Any]:
    rules = {r["alert"]: r for g in yaml.safe_load((DEPLOY / "alerts.yml").read_text())["groups"]
             for r in g["rules"]}
    expected = []
    for labels in fires:
        annotations = {k: v.replace("{{ $labels.instance }}", labels.get("instance", ""))
                       .replace("{{ $labels.route }}", labels.get("route", ""))
                       for k, v in rules[alert]["annotations"].items()}
        expected.append({"exp_labels": {**labels, **rules[alert]["labels"]},
                         "exp_annotations": annotations})
    return {"interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": expected}]}


PROXY = 'instance="proxy:8080", job="context-proxy"'


def test_the_alerts_fire_when_they_should_and_only_then(tmp_path: Path) -> None:
    failing = [(f'context_proxy_compactions_total{{outcome="failed", {PROXY}}}', "0+1x40"),
               (f'context_proxy_compactions_total{{outcome="auto", {PROXY}}}', "0+1x40")]
    healthy = [(f'context_proxy_compactions_total{{outcome="failed", {PROXY}}}', "0x40"),
               (f'context_proxy_compactions_total{{outcome="auto", {PROXY}}}', "0+5x40")]
    # rejected at minute 3, fixed (a good load) at minute 20
    reloads = [(f"context_proxy_policy_last_reload_successful{{{PROXY}}}", "1 1 1 0x16 1x20")]
    down = [(f'context_proxy_upstream_errors_total{{route="chat", status="unreachable", '
             f'{PROXY}}}', "0+2x30"),
            (f'context_proxy_upstream_time_to_first_byte_seconds_count{{route="chat", '
             f'{PROXY}}}', "0+10x10 100x20")]
    errors = [(f'context_proxy_upstream_errors_total{{route="chat", status="502", {PROXY}}}',
               "0+2x40"),
              (f'context_proxy_upstream_time_to_first_byte_seconds_count{{route="chat", '
               f'{PROXY}}}', "0+10x40")]
    who = {"instance": "proxy:8080", "job": "context-proxy"}
    tests = [
        _alert_test(failing, "ContextProxySummaryFailures", "30m", [{}]),
        _alert_test(healthy, "ContextProxySummaryFailures", "30m", []),
        _alert_test(reloads, "ContextProxyPolicyReloadRejected", "15m", [who]),
        _alert_test(reloads, "ContextProxyPolicyReloadRejected", "30m", []),
        _alert_test(down, "ContextProxyUpstreamUnreachable", "8m", []),  # answers still come
        _alert_test(down, "ContextProxyUpstreamUnreachable", "25m", [{}]),
        _alert_test(errors, "ContextProxyUpstreamErrors", "30m", [{}]),
        _alert_test(healthy, "ContextProxyUpstreamErrors", "30m", []),
    ]
    spec = tmp_path / "alerts_test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(DEPLOY / "alerts.yml")],
                                    "evaluation_interval": "1m", "tests": tests}))
    result = promtool("test", "rules", str(spec))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_is_pinned() -> None:
    text = dockerfile()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert bases and all(re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+[\w.-]*", b) for b in bases), bases
    pins = {}
    for line in (DEPLOY / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version and re.fullmatch(r"[\w.+!-]+", version), line
            pins[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dependency in map(Requirement, project["dependencies"]):
        name = canonicalize_name(dependency.name)
        assert name in pins, dependency
        assert dependency.specifier.contains(pins[name], prereleases=True), (dependency,
                                                                              pins[name])


def test_dependencies_install_in_their_own_layer_before_the_code() -> None:
    lines = [line.split()[:2] for line in dockerfile().splitlines() if line.strip()]
    steps = [" ".join(parts) for parts in lines]
    deps = next(i for i, s in enumerate(steps) if s.startswith("COPY deploy/requirements.txt"))
    code = next(i for i, s in enumerate(steps) if s.startswith("COPY proxy"))
    assert deps < code
    assert "-r /tmp/requirements.txt" in dockerfile()
    assert "pip install --no-cache-dir --no-deps ." in dockerfile()  # the code adds nothing


def test_health_check_follows_the_port_setting() -> None:
    text = dockerfile()
    check = text[text.index("HEALTHCHECK"):].split("\nCMD", 1)[0]
    assert "CONTEXT_PROXY_PORT" in check and "/healthz" in check
    assert "127.0.0.1:8080" not in check


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", value)
    assert match, value
    return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60}[match[2]]


def test_shutdown_grace_ends_before_docker_kills_the_proxy() -> None:
    proxy = compose()["services"]["proxy"]
    grace = float(proxy["environment"]["CONTEXT_PROXY_SHUTDOWN_GRACE_S"])
    image_grace = re.search(r"CONTEXT_PROXY_SHUTDOWN_GRACE_S=(\d+)", dockerfile())
    assert image_grace and float(image_grace[1]) == grace
    assert grace < _seconds(proxy["stop_grace_period"]) <= 10  # docker stop's default: 10 s


def test_compose_runs_the_proxy_with_prometheus_and_its_rules() -> None:
    services = compose()["services"]
    assert services["proxy"]["build"] == {"context": "..", "dockerfile": "Dockerfile"}
    mounts = services["prometheus"]["volumes"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    assert prometheus["rule_files"] == ["alerts.yml"]  # beside prometheus.yml in the container
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    port = services["proxy"]["environment"]["CONTEXT_PROXY_PORT"]
    assert targets == [f"proxy:{port}", f"proxy-2:{port}"]  # every replica is scraped
    assert services["proxy"]["image"].endswith(":" + tomllib.loads(
        (ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_compose_runs_two_replicas_on_one_postgresql() -> None:
    services = compose()["services"]
    replicas = [services["proxy"], services["proxy-2"]]
    assert replicas[0]["environment"] == replicas[1]["environment"]  # the same store
    url = replicas[0]["environment"]["CONTEXT_PROXY_DATABASE_URL"]
    assert url.startswith("postgresql://") and "@postgres:5432/" in url
    assert "${POSTGRES_PASSWORD:?" in url  # no password is written down
    for replica in replicas:
        assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert replica["image"] == services["proxy"]["image"]
    assert {r["ports"][0].split(":")[0] for r in replicas} == {"8080", "8081"}
    postgres = services["postgres"]
    assert re.fullmatch(r"postgres:\d+\.\d+", postgres["image"])  # pinned
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])


def test_the_image_leaves_caches_and_secrets_out() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"**/__pycache__", "**/*.py[cod]", ".env", ".git", ".venv", "tests"} <= set(ignored)
    # One Dockerfile, at the root (where `docker build .` looks); deploy/ keeps the rest.
    assert (ROOT / "Dockerfile").is_file() and not (DEPLOY / "Dockerfile").exists()
