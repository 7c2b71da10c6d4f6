"""The Redis store's own behaviour (URLs, passwords, TTL, sharing, TLS) against a real
redis-server. The rules themselves run against Redis in tests/test_store_contract.py."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import require
from dsh_circuit_breaker import CircuitBreaker, Config, ConfigError
from dsh_circuit_breaker.core.stores import StoreUnavailable, store_from_url
from support.breaker_warnings import count_warnings
from support.redis_server import RedisServer, fresh_url, redis_available, shared_server


@pytest.fixture(autouse=True)
def _need_redis() -> None:
    require(redis_available(), "redis-server and the redis extra")


def _client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url.partition("?")[0], socket_timeout=5)


def _prefix(url: str) -> str:
    return url.partition("prefix=")[2].partition("&")[0]


def test_url_selects_the_redis_store() -> None:
    from dsh_circuit_breaker.core.stores.redis import RedisStore

    store = store_from_url(fresh_url(), Config())
    assert isinstance(store, RedisStore)
    store.close()
    store = store_from_url("rediss://example.invalid:6380/2", Config())
    assert isinstance(store, RedisStore)  # building it connects to nothing yet
    store.close()


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:6379/notanumber",
        "redis://127.0.0.1:6379/0?socket_timeout=9",
        "redis://127.0.0.1:6379/0?retry_after=soon",
        "redis://127.0.0.1:6379/0?retry_after=-1",
    ],
)
def test_bad_urls_fail_loudly(url: str) -> None:
    with pytest.raises(ConfigError):
        store_from_url(url, Config())


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("redis://127.0.0.1:6379/0?retry_afer=5", "unknown parameter 'retry_afer'"),
        ("redis://127.0.0.1:6379/0?client_name=x", "unknown parameter 'client_name'"),
        ("redis://127.0.0.1:6379/0?ssl_ca_certs=/ca.pem", "ssl_ca_certs is a TLS setting"),
        ("rediss://127.0.0.1:6379/0?ssl_cert_reqs=bogus", "Requirements Flag: bogus"),
        ("redis://127.0.0.1:6379/0?retry_after=nan", "retry_after"),
        ("redis://127.0.0.1:6379/0?prefix=a&prefix=b", "given twice"),
    ],
)
def test_urls_that_could_never_work_fail_at_load_naming_the_problem(url: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        store_from_url(url, Config())


def test_bad_url_error_hides_the_password() -> None:
    with pytest.raises(ConfigError) as caught:
        store_from_url("redis://:hunter2@127.0.0.1:6379/x", Config())
    assert "hunter2" not in str(caught.value)


def test_two_workers_share_one_agent() -> None:
    url = fresh_url()
    worker_a = CircuitBreaker(Config(), state=url)
    worker_b = CircuitBreaker(Config(), state=url)
    call = ("bash", {"command": "pytest -x"})
    assert [worker_a.check("agent-7", *call).allowed for _ in range(3)] == [True] * 3
    assert [worker_b.check("agent-7", *call).allowed for _ in range(2)] == [True] * 2
    sixth = worker_a.check("agent-7", *call)
    assert (sixth.allowed, sixth.kind, sixth.count) == (False, "duplicate", 6)
    assert not worker_b.check("agent-7", *call).allowed
    worker_b.reset("agent-7")
    assert worker_a.check("agent-7", *call).allowed
    worker_a.close()
    worker_b.close()


def test_record_is_digests_only_with_ttl() -> None:
    url = fresh_url()
    breaker = CircuitBreaker(Config(idle_expiry_seconds=3600), state=url)
    assert breaker.check("a", "bash", {"command": "echo SECRET-TOKEN-123"}).allowed
    client = _client(url)
    key = f"{_prefix(url)}a".encode()
    raw = client.get(key)
    assert raw is not None and b"SECRET-TOKEN-123" not in raw and b"echo" not in raw
    assert 3_590_000 < client.pttl(key) <= 3_600_000
    breaker.close()


def test_idle_agent_expires() -> None:
    url = fresh_url()
    breaker = CircuitBreaker(Config(duplicate_limit=2, window=2, idle_expiry_seconds=1), state=url)
    assert breaker.check("a", "t", {}).allowed
    assert not breaker.check("a", "t", {}).allowed
    time.sleep(1.3)
    assert breaker.check("a", "t", {}).allowed  # a fresh agent after its TTL
    breaker.close()


def test_denials_keep_a_capped_agent_alive() -> None:
    url = fresh_url()
    breaker = CircuitBreaker(Config(max_calls_per_agent=1, idle_expiry_seconds=2), state=url)
    assert breaker.check("a", "t", {"i": 0}).allowed
    for i in range(4):  # 2.4 s of denials: longer than the TTL, but never idle that long
        time.sleep(0.6)
        assert breaker.check("a", "t", {"i": i + 1}).kind == "cap"
    breaker.close()


def test_database_number_and_prefix_are_honoured() -> None:
    server = shared_server()
    url = f"redis://127.0.0.1:{server.port}/5?prefix=fleet-x:"
    breaker = CircuitBreaker(Config(), state=url)
    assert breaker.check("worker/1", "t", {}).allowed
    assert _client(f"redis://127.0.0.1:{server.port}/5").exists(b"fleet-x:worker/1") == 1
    assert _client(f"redis://127.0.0.1:{server.port}/0").exists(b"fleet-x:worker/1") == 0
    assert [agent for agent, _ in breaker.store.agents()] == ["worker/1"]
    breaker.reset("worker/1")
    assert list(breaker.store.agents()) == []
    breaker.close()


def test_agents_lists_only_this_prefix() -> None:
    url_a, url_b = fresh_url(), fresh_url()
    a = CircuitBreaker(Config(), state=url_a)
    b = CircuitBreaker(Config(), state=url_b)
    for i in range(450):  # more than one SCAN page and one MGET batch
        a.check(f"agent-{i}", "t", {"i": i})
    b.check("other", "t", {})
    listed = dict(a.store.agents())
    assert len(listed) == 450 and "other" not in listed
    assert listed["agent-7"].calls == 1
    a.close()
    b.close()


def test_incident_reported_once_across_workers(tmp_path: Path) -> None:
    url = fresh_url()
    log = tmp_path / "incidents.jsonl"
    config = Config(duplicate_limit=3, window=4, incident_log=str(log))
    workers = [CircuitBreaker(config, state=url) for _ in range(3)]
    for _ in range(4):
        for worker in workers:
            worker.check("agent-9", "web_search", {"q": "same"})
    lines = log.read_text().splitlines()
    # Six refusals in a row: the first duplicate and the first stop, each once for the fleet.
    assert [json.loads(line)["kind"] for line in lines] == ["duplicate", "stop"]
    assert all('"agent":"agent-9"' in line for line in lines)
    for worker in workers:
        worker.close()


@pytest.fixture(scope="module")
def password_server() -> Any:
    require(redis_available(), "redis-server and the redis extra")
    with RedisServer(password="s3cret/pw") as server:
        yield server


class TestPassword:
    @pytest.fixture
    def server(self, password_server: RedisServer) -> RedisServer:
        return password_server

    def test_password_in_url(self, server: RedisServer) -> None:
        url = f"redis://:s3cret%2Fpw@127.0.0.1:{server.port}/0?prefix=inurl:"
        breaker = CircuitBreaker(Config(duplicate_limit=2, window=2), state=url)
        assert breaker.check("a", "t", {}).allowed
        assert breaker.check("a", "t", {}).kind == "duplicate"  # the state really is in Redis
        breaker.close()

    def test_password_from_environment(
        self, server: RedisServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("REDIS_PASSWORD", "s3cret/pw")
        breaker = CircuitBreaker(Config(duplicate_limit=2, window=2), state=fresh_url(server))
        assert breaker.check("a", "t", {}).allowed
        assert breaker.check("a", "t", {}).kind == "duplicate"
        breaker.close()

    def test_user_and_password_in_url(self, server: RedisServer) -> None:
        url = f"redis://default:s3cret%2Fpw@127.0.0.1:{server.port}/0?prefix=userpw:"
        breaker = CircuitBreaker(Config(duplicate_limit=2, window=2), state=url)
        assert breaker.check("a", "t", {}).allowed
        assert breaker.check("a", "t", {}).kind == "duplicate"
        breaker.close()

    def test_wrong_password_is_unavailable(
        self, server: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: Any
    ) -> None:
        monkeypatch.delenv("REDIS_PASSWORD", raising=False)
        url = f"redis://:wrong@127.0.0.1:{server.port}/0"
        store = store_from_url(url, Config())
        with pytest.raises(StoreUnavailable) as caught:
            store.reset("a")
        assert "wrong" not in str(caught.value)
        store.close()
        with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
            assert CircuitBreaker(Config(), state=url).check("a", "t", {}).allowed
            closed = CircuitBreaker(Config(fail_closed=True), state=url).check("a", "t", {})
        assert (closed.allowed, closed.kind) == (False, "unavailable")
        assert "state store unavailable" in caplog.text


def _make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with the openssl CLI."""
    ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
    key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
    ext = directory / "ext.cnf"
    # What Python 3.13's default context (VERIFY_X509_STRICT) demands: a CA with key usage,
    # a server certificate naming its issuer's key.
    ext.write_text("subjectAltName=IP:127.0.0.1\nauthorityKeyIdentifier=keyid,issuer\n")

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        "-subj", "/CN=dshcb-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout", str(ca_key), "-out", str(ca_crt))  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(key), "-out", str(csr))  # fmt: skip
    run("x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(crt))  # fmt: skip
    return ca_crt, crt, key


def test_rediss_over_tls(tmp_path: Path) -> None:
    require(shutil.which("openssl") is not None, "the openssl command")
    ca, crt, key = _make_certificates(tmp_path)
    # TLS only: the plain port is off, so a working call proves the TLS path.
    with RedisServer(tmp_path / "data", tls=(ca, crt, key)) as server:
        assert server.url.startswith("rediss://")
        breaker = CircuitBreaker(Config(duplicate_limit=3, window=3), state=server.url)
        assert [breaker.check("a", "t", {}).allowed for _ in range(3)] == [True, True, False]
        breaker.close()
        # A client that does not trust this CA is refused: the certificate is checked.
        untrusting = CircuitBreaker(
            Config(fail_closed=True), state=f"rediss://127.0.0.1:{server.port}/0"
        )
        assert untrusting.check("a", "t", {}).kind == "unavailable"
        untrusting.close()


def test_forked_child_uses_its_own_connection(caplog: Any) -> None:
    import multiprocessing

    url = fresh_url()
    breaker = CircuitBreaker(Config(max_calls_per_agent=0), state=url)
    assert breaker.check("a", "t", {"who": "parent", "i": -1}).allowed  # a connection is open
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    out = context.Queue()

    def run(who: str) -> list[bool]:
        barrier.wait()  # parent and child talk to Redis at the same time
        return [breaker.check("a", "t", {"who": who, "i": i}).allowed for i in range(150)]

    def child() -> None:
        warned = count_warnings()
        out.put((all(run("child")), warned.count))

    process = context.Process(target=child)
    process.start()
    with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
        assert all(run("parent"))
    assert out.get(timeout=60) == (True, 0)
    process.join(timeout=30)
    assert process.exitcode == 0
    assert caplog.text == ""  # had they shared the socket, replies would have crossed
    assert dict(breaker.store.agents())["a"].calls == 301
    breaker.close()


@pytest.mark.parametrize("kind", ["corrupt", "wrong type"])
def test_unreadable_record_is_replaced_and_the_agent_guarded_again(caplog: Any, kind: str) -> None:
    """A record that cannot be read (garbage, or a list where a string belongs) is that
    agent's problem only: a warning, a fresh start, and the next write replaces it, so
    the agent is guarded again. The store is not marked down for anyone else."""
    url = fresh_url()
    breaker = CircuitBreaker(Config(fail_closed=True), state=url)
    key = f"{_prefix(url)}broken".encode()
    if kind == "corrupt":
        _client(url).set(key, b"not a record")
    else:
        _client(url).rpush(key, b"x")
    with caplog.at_level(logging.WARNING, logger="dsh_circuit_breaker"):
        # Not an outage: allowed even with failClosed, and other agents still counted.
        assert breaker.check("broken", "t", {}).allowed
        assert [breaker.check("fine", "t", {}).allowed for _ in range(6)] == [True] * 5 + [False]
    assert caplog.text.count("unreadable state record of agent 'broken'") == 1
    assert "unavailable" not in caplog.text
    assert _client(url).type(key) == b"string"
    assert [breaker.check("broken", "t", {}).allowed for _ in range(5)] == [True] * 4 + [False]
    breaker.close()


def test_agents_lists_an_unreadable_record_as_none() -> None:
    url = fresh_url()
    store = store_from_url(url)
    CircuitBreaker(Config(), state=store).check("fine", "t", {})
    _client(url).set(f"{_prefix(url)}broken".encode(), b'{"v":1,"calls":"x"')
    listed = dict(store.agents())  # one corrupt record hides no other agent
    assert listed["broken"] is None and listed["fine"] is not None
    assert listed["fine"].calls == 1
    store.close()


@pytest.mark.parametrize("seed", range(6))
def test_same_decisions_as_memory_and_sqlite(seed: int, tmp_path: Path) -> None:
    """Random runs (small windows, few distinct calls, resets) give the same decision,
    kind and count through every store: the Redis path cannot drift from the others."""
    import random

    rng = random.Random(seed)
    limit = rng.randint(2, 5)
    config = Config(
        duplicate_limit=limit,
        window=rng.randint(limit, 8),
        reset_on_new_call=rng.random() < 0.5,
        max_calls_per_agent=rng.choice([0, 15, 40]),
    )
    urls = ["memory://", f"sqlite:///{tmp_path}/state.db", fresh_url()]
    breakers = [CircuitBreaker(config, state=url) for url in urls]
    for _ in range(400):
        agent = rng.choice(["a", "b", "c"])
        if rng.random() < 0.01:
            for breaker in breakers:
                breaker.reset(agent)
            continue
        args = {"q": rng.choice("ABCDE"), "description": str(rng.random())}
        memory, *others = [
            (d.allowed, d.kind, d.count, d.limit)
            for d in (b.check(agent, "t", args) for b in breakers)
        ]
        assert others == [memory, memory]
    for breaker in breakers:
        breaker.close()


def test_missing_client_library_is_a_clear_config_error() -> None:
    code = (
        "import sys; sys.modules['redis'] = None\n"  # as if the extra were not installed
        "from dsh_circuit_breaker import ConfigError\n"
        "from dsh_circuit_breaker.core.stores import store_from_url\n"
        "try:\n"
        "    store_from_url('redis://127.0.0.1:6379/0')\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "pip install 'dsh-circuit-breaker[redis]'" in out.stdout, out.stderr


def _evals(client: Any) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_eval", {}).get("calls", 0))


def test_a_contended_agent_skips_the_compare_and_set_until_its_own_record_is_back(
    tmp_path: Path,
) -> None:
    """Two processes (two stores) deciding for one agent in turn: each compare-and-set
    would miss, so after the first miss a store reads first, as it did before it kept
    states; once it reads back the record it wrote itself, it tries one round trip again."""
    with RedisServer(tmp_path / "redis") as server:
        url = fresh_url(server)
        first, second = (store_from_url(url, Config()) for _ in range(2))
        client = _client(url)
        for store in (first, second):
            store.transact("a", lambda state: state.calls)  # each has a state kept now
        before = _evals(client)
        for _ in range(5):
            for store in (first, second):
                store.transact("a", lambda state: state.calls)
        assert _evals(client) - before == 2  # one miss each, then reads first
        before = _evals(client)
        for _ in range(2):  # reads the second's record, then its own back
            first.transact("a", lambda state: state.calls)
        assert _evals(client) == before
        first.transact("a", lambda state: state.calls)
        assert _evals(client) - before == 1  # one compare-and-set, which did not miss
        for store in (first, second):
            store.close()
