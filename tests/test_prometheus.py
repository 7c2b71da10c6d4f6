"""A real Prometheus (Debian's `prometheus`) scrapes `serve --http`'s /metrics with the scrape
config docs/http-guard.md shows (the guard's token file as its bearer credential), and its
HTTP API then holds the counters of a looping agent that was refused and stopped."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import require
from doc_blocks import ROOT, blocks
from hook_support import hook_env, pre_tool_use
from support.guard_service import Service

pytestmark = pytest.mark.timeout(120)
JOB = "dsh-circuit-breaker"


def doc_scrape_config() -> dict[str, Any]:
    """docs/http-guard.md's Prometheus block: the config a reader copies."""
    found = [b for b in blocks(ROOT / "docs" / "http-guard.md") if "scrape_configs" in b.text]
    assert len(found) == 1, found
    config: dict[str, Any] = yaml.safe_load(found[0].text)
    return config


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def query(api: str, promql: str) -> list[dict[str, Any]]:
    url = f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.loads(response.read(1024 * 1024))
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def values(api: str, promql: str) -> dict[str, float]:
    """harness -> value of each series `promql` gives."""
    return {r["metric"].get("harness", ""): float(r["value"][1]) for r in query(api, promql)}


def wait_for(what: str, check: Any, seconds: float = 40.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            found = check()
        except OSError:  # Prometheus still starting
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus never showed {what}")
        time.sleep(0.5)


def test_prometheus_scrapes_the_guard_with_its_token(tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    require(binary is not None, "Debian's prometheus (scripts/setup)")
    assert binary is not None
    config_file = tmp_path / "loop-guard.json"
    config_file.write_text('{"duplicateLimit": 2, "stopAfterDenials": 2}')
    env = hook_env(tmp_path, DSH_CIRCUIT_BREAKER_CONFIG=str(config_file))
    with Service(env, token=None) as service:  # its token file, as a user runs it
        token_file = Path(env["XDG_STATE_HOME"]) / "dsh-circuit-breaker" / "http-token"
        config = doc_scrape_config()
        job = config["scrape_configs"][0]
        job["authorization"]["credentials_file"] = str(token_file)
        job["static_configs"] = [{"targets": [f"127.0.0.1:{service.port}"]}]
        config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s"}
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        api = f"http://127.0.0.1:{free_port()}"
        log = (tmp_path / "prometheus.log").open("wb")
        prometheus = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={api.removeprefix('http://')}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        try:
            wait_for("a successful scrape", lambda: values(api, f'up{{job="{JOB}"}}') == {"": 1})
            # Every harness's stops start at 0, so the first stop is an increase.
            stops = "dsh_circuit_breaker_stops_total"
            wait_for("the stops at 0", lambda: values(api, stops).get("claude-code") == 0)
            event = pre_tool_use("Bash", {"command": "npm test"}, session="looping")
            answers = [service.hook(event) for _ in range(5)]
            refused = sum(b'"deny"' in a for a in answers)
            assert refused >= 2, answers
            wait_for("the stops", lambda: values(api, stops).get("claude-code") == refused - 1)
            denials = values(api, "dsh_circuit_breaker_denials_total")
            assert denials["claude-code"] == refused
            assert set(denials.values()) == {0, refused}  # the other harnesses, seeded
            by_kind = {
                r["metric"]["kind"]: float(r["value"][1])
                for r in query(api, 'dsh_circuit_breaker_decisions_total{harness="claude-code"}')
            }
            assert by_kind == {"allow": 5 - refused, "duplicate": refused}
            # docs/observability.md's query: stop decisions of the last hour by harness.
            hour = values(api, "sum by (harness) (increase(dsh_circuit_breaker_stops_total[1h]))")
            assert hour["claude-code"] >= refused - 1, hour
            assert {h: v for h, v in hour.items() if h != "claude-code"} == dict.fromkeys(
                set(hour) - {"claude-code"}, 0.0
            )
        finally:
            prometheus.terminate()
            try:
                prometheus.wait(15)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait(15)
            log.close()
