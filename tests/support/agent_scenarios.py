"""The scenarios the framework integration tests (tests/test_integration_*.py) all drive,
written once and framework-neutral: a model that loops on one search call, the refusal it
must be sent, and a healthy edit-test cycle. Each test turns these calls into its own
framework's messages and keeps its own checks of how the framework delivered them.

Over the wire, the same scenarios are turns of a scripted model server
(tests/support/fake_*.py) that the framework reaches through its real provider client:
`wire_loop` and `wire_script` answer from the tool results in the request they are
answering, and `check_wire_loop` reads each refused call's result from the model request
that came next, in the provider's own wire format.

conftest.py registers this module for pytest's assertion rewriting, so a failing check
here reports the values as one written in a test would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from dsh_circuit_breaker import Config
from dsh_circuit_breaker.core.messages import DEFAULT_MESSAGES
from support.scripted_server import ScriptedServer, ToolResult, tool_call

if TYPE_CHECKING:
    import pytest

ResultsOf = Callable[[dict[str, Any]], list[ToolResult]]

Call = tuple[str, dict[str, Any], str]  # tool name, arguments, call id
T = TypeVar("T")

DENIED = "Circuit breaker: NOT run, a repeat"  # how a refused search's result begins
# The default duplicateLimit: its LIMIT-th identical call is the first refused, so RUNS
# identical calls run before it (shared/SPEC.md rule 4).
LIMIT = Config().duplicate_limit
RUNS = LIMIT - 1
GIVE_UP = "I keep being refused; stopping here."  # what the looping model ends with
# The looping model reads this many refusals, then gives up on its own: fewer than the
# default stopAfterDenials (3), so its run ends on its own answer, not on a stop. The stop
# tests (tests/test_integration_stop.py) use a model that never gives up.
GIVE_UP_AFTER = 2


def is_refusal(text: str) -> bool:
    """Whether a tool result's text is the breaker's refusal (the default message)."""
    return "Circuit breaker" in text


def since_last_prompt(messages: list[T], is_prompt: Callable[[T], bool]) -> list[T]:
    """The messages from the latest user prompt on (all of them when there is none): what
    the model has been sent in the current turn."""
    starts = [i for i, m in enumerate(messages) if is_prompt(m)]
    return messages[starts[-1] :] if starts else messages


def loop_call(tag: str, n: int) -> Call:
    """The looping model's call number `n` (from 0): the same search every time, each
    under its own id `<tag>-<n>`."""
    return ("search", {"query": "same"}, f"{tag}-{n}")


def assert_loop_refusal(text: str) -> None:
    """The text a refused repeat of the looping search must carry: the default refusal,
    counting the refused call among the copies (it is the LIMIT-th), and the limit."""
    assert text.startswith(DENIED)
    assert f"(copies: {LIMIT}, limit: {LIMIT}): this search call is identical to calls" in text


def edit_test_cycle(edits: int) -> list[Call]:
    """A healthy loop: run the tests, edit, `edits` times over, then run them once more.
    The run_tests calls are all identical, but an edit comes between any two of them, so
    none may be refused."""
    script: list[Call] = []
    for i in range(edits):
        script.append(("run_tests", {"path": "tests/"}, f"t{i}"))
        script.append(("edit", {"file": "a.py", "text": f"fix {i}"}, f"e{i}"))
    script.append(("run_tests", {"path": "tests/"}, "final"))
    return script


def search_function(ran: list[str]) -> Callable[[str], str]:
    """The looping model's tool as a plain function (each framework wraps it its own way):
    records each query it runs in `ran`."""

    def search(query: str) -> str:
        """Search the web."""
        ran.append(query)
        return f"results for {query}"

    return search


def edit_test_functions(ran: list[str]) -> tuple[Callable[[str], str], Callable[[str, str], str]]:
    """The edit-test cycle's two tools as plain functions: `run_tests` always reports a
    failure, `edit` succeeds; each records "test" or "edit" in `ran` when it runs."""

    def run_tests(path: str) -> str:
        """Run the tests."""
        ran.append("test")
        return "1 failed"

    def edit(file: str, text: str) -> str:
        """Edit a file."""
        ran.append("edit")
        return "ok"

    return run_tests, edit


# -- over the wire ---------------------------------------------------------------------
OFFLINE_ENV = {
    # Every provider client finds a key, so none looks for credentials elsewhere.
    "OPENAI_API_KEY": "dummy",
    "ANTHROPIC_API_KEY": "dummy",
    "GOOGLE_API_KEY": "dummy",
    "GEMINI_API_KEY": "dummy",
    # No traces or telemetry leave the process.
    "OPENAI_AGENTS_DISABLE_TRACING": "1",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "OTEL_SDK_DISABLED": "true",
    # Anything but loopback goes to a dead proxy and fails at once.
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "ALL_PROXY": "http://127.0.0.1:9",
    "NO_PROXY": "127.0.0.1,localhost",
}
# Settings that would send a client to Vertex AI, another base URL, or a trace collector.
OFFLINE_UNSET = (
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_ENTERPRISE",
    "OPENAI_BASE_URL",
    "ANTHROPIC_BASE_URL",
    "GOOGLE_GEMINI_BASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
)


def go_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Set OFFLINE_ENV and drop OFFLINE_UNSET for one test (lower-case proxy settings,
    which some clients prefer, are dropped too)."""
    for name, value in OFFLINE_ENV.items():
        monkeypatch.setenv(name, value)
        monkeypatch.delenv(name.lower(), raising=False)
    for name in OFFLINE_UNSET:
        monkeypatch.delenv(name, raising=False)


def wire_loop(results_of: ResultsOf, tag: str = "loop", give_up_after: int = GIVE_UP_AFTER) -> Any:
    """The looping model as a scripted server's turn: call `loop_call(tag, n)` with n the
    number of tool results in the request, until `give_up_after` of them are refusals."""

    def respond(body: dict[str, Any]) -> Any:
        results = results_of(body)
        if sum(is_refusal(r.text) for r in results) >= give_up_after:
            return GIVE_UP
        name, args, call_id = loop_call(tag, len(results))
        return tool_call(name, args, call_id)

    return respond


def wire_script(results_of: ResultsOf, calls: list[Call], final: str) -> Any:
    """A scripted server's turn that makes `calls` one by one (the next one once the
    request carries the results of all before it), then answers `final`."""

    def respond(body: dict[str, Any]) -> Any:
        n = len(results_of(body))
        return tool_call(calls[n][0], calls[n][1], calls[n][2]) if n < len(calls) else final

    return respond


def check_wire_loop(
    server: ScriptedServer,
    error_flag: bool,
    tag: str = "loop",
    refusal: Callable[[str], str] = str,
) -> None:
    """The looping run seen on the wire: each of its calls is answered in the very next
    model request; the first RUNS (5) by the tool's own result, the next GIVE_UP_AFTER (the
    6th and 7th) by the refusal, with the API's error flag set if `error_flag` (the API
    has one and the framework sets it). `refusal` takes the refusal out of a framework's
    own framing of an error result's text (a JSON wrapper, say)."""
    for n in range(RUNS + GIVE_UP_AFTER):
        result = server.result_in_next_request(f"{tag}-{n}")
        refused = n >= RUNS
        if refused:
            assert_loop_refusal(refusal(result.text))
        else:
            assert result.text == "results for same"
        assert result.is_error == (refused and error_flag), (n, result)
    assert server.errors == []


def check_wire_healthy(server: ScriptedServer, script: list[Call]) -> None:
    """The healthy cycle seen on the wire: every call of `script` was answered, in order,
    and no answer is a refusal or carries the API's error flag."""
    sent = server.tool_results()
    assert [r.call_id for r in sent] == [call_id for _, _, call_id in script]
    assert not any(is_refusal(r.text) or r.is_error for r in sent)
    assert server.errors == []


# -- the stop and the budget over the wire (issue 20's frameworks) ----------------------
# A looping model that never gives up ends its run with this text past BOUND tool results,
# so a stop that fails to happen fails its test instead of hanging it.
BOUND = 40
UNBOUNDED = "the script's bound was reached"
BUDGET = 12  # the web_search budget the budget scenario sets (tool_limits)
# What the person is told when the looping model is stopped, and what the 13th search gets.
STOP_REASON = DEFAULT_MESSAGES["stop"].format(tool="search", kind="duplicate", count=3, limit=3)
BUDGET_TEXT = DEFAULT_MESSAGES["budget"].format(
    tool="web_search", kind="budget", count=BUDGET, limit=BUDGET
)
DONE_SEARCHING = "done searching"


def wire_loop_forever(results_of: ResultsOf, tag: str = "loop") -> Any:
    """The looping model that no longer reads its results: the same search, again and
    again, up to BOUND results."""

    def respond(body: dict[str, Any]) -> Any:
        n = len(results_of(body))
        return UNBOUNDED if n >= BOUND else tool_call(*loop_call(tag, n))

    return respond


def check_wire_stop(
    server: ScriptedServer,
    error_flag: bool,
    tag: str = "loop",
    refusal: Callable[[str], str] = str,
) -> None:
    """A stopped loop on the wire: RUNS + 3 (8) model requests, each made one call; calls
    6 and 7 were answered with the refusal in the next request, and no request followed
    the 8th (its call, the third refusal in a row, stopped the agent). `refusal`: as in
    `check_wire_loop`."""
    assert len(server.model_requests) == RUNS + 3
    for n in range(RUNS + 2):
        result = server.result_in_next_request(f"{tag}-{n}")
        if n >= RUNS:
            assert_loop_refusal(refusal(result.text))
        else:
            assert result.text == "results for same"
        assert result.is_error == (n >= RUNS and error_flag), (n, result)
    last = f"{tag}-{RUNS + 1}"
    assert [r.call_id for r in server.results_of(server.model_requests[-1])][-1] == last
    assert server.errors == []


def wire_searching(results_of: ResultsOf, tag: str = "s") -> Any:
    """A different web search each time, call `<tag>-<n>`, until one is refused; then it
    answers."""

    def respond(body: dict[str, Any]) -> Any:
        results = results_of(body)
        if len(results) >= BOUND:
            return UNBOUNDED
        if results and is_refusal(results[-1].text):
            return DONE_SEARCHING
        n = len(results)
        return tool_call("web_search", {"query": f"topic {n}"}, f"{tag}-{n}")

    return respond


def check_wire_budget(
    server: ScriptedServer, budget_text: str, error_flag: bool, tag: str = "s"
) -> None:
    """A web_search budget of BUDGET on the wire: the first BUDGET searches' results came
    back from the tool, the next one's is the budget text, and the model then finished."""
    sent = server.tool_results()
    assert [r.call_id for r in sent] == [f"{tag}-{n}" for n in range(BUDGET + 1)]
    assert [r.text for r in sent[:BUDGET]] == [f"results for topic {n}" for n in range(BUDGET)]
    assert sent[-1].text == budget_text
    assert [r.is_error for r in sent] == [False] * BUDGET + [error_flag]
    assert len(server.model_requests) == BUDGET + 2
    assert server.errors == []


# -- results as progress over the wire (issue 25) ----------------------------------------
POLLS = 10  # how often the poller polls when nothing refuses it: past the limit of 6
SAME_RESULTS = 6  # the interleaved poller's sameResultLimit
POLL_DONE = "the job is done"
POLL_REFUSED = "my poll was refused; stopping here."
POLL_DENIED = "Circuit breaker: NOT run, a repeat"


@dataclass(frozen=True)
class Poller:
    """A model that polls a job (`poll(job="7")`, call `poll-<k>`) POLLS times, a new
    `note` call between any two polls when `interleaved`, and gives up at a refusal.

    `moving`: the job's output moves at every poll (a count of books). Frozen, it differs
    only in a clock time, which normalizing masks: the same result every time.
    `config`: the default one (resultProgress is on by default), with sameResultLimit
    turned on when `interleaved` (the notes between polls restart rule 4's count);
    `refused_at`: which poll (from 1) must be refused, None for none."""

    moving: bool
    interleaved: bool = False

    @property
    def config(self) -> Config:
        return Config.from_mapping({"sameResultLimit": SAME_RESULTS} if self.interleaved else {})

    @property
    def refused_at(self) -> int | None:
        if self.moving:
            return None
        # Interleaved: the poll after SAME_RESULTS identical results; else rule 4's LIMIT-th.
        return SAME_RESULTS + 1 if self.interleaved else LIMIT

    @property
    def refused_counts(self) -> str:
        """The counts the refused poll's text names: the same results seen, or the copies."""
        n = SAME_RESULTS if self.interleaved else LIMIT
        return f"(copies: {n}, limit: {n})"

    @property
    def calls(self) -> list[Call]:
        calls: list[Call] = []
        for k in range(POLLS):
            if self.interleaved and k:
                calls.append(("note", {"text": f"waiting {k}"}, f"note-{k}"))
            calls.append(("poll", {"job": "7"}, f"poll-{k}"))
        return calls

    def functions(self, ran: list[str]) -> tuple[Callable[[str], str], Callable[[str], str]]:
        """The tools as plain functions: `poll` records "poll" in `ran`, `note` "note"."""
        moving = self.moving

        def poll(job: str) -> str:
            """Poll a background job's status."""
            ran.append("poll")
            n = ran.count("poll")
            return f"job {job}: {n if moving else 3} books ingested, checked at 04:44:{n:02d}"

        def note(text: str) -> str:
            """Write a note."""
            ran.append("note")
            return "noted"

        return poll, note

    def wire(self, results_of: ResultsOf) -> Any:
        """The poller as a scripted server's turn."""
        calls = self.calls

        def respond(body: dict[str, Any]) -> Any:
            results = results_of(body)
            if results and is_refusal(results[-1].text):
                return POLL_REFUSED
            n = len(results)
            return tool_call(*calls[n]) if n < len(calls) else POLL_DONE

        return respond

    def check_wire(
        self,
        server: ScriptedServer,
        error_flag: bool,
        refusal: Callable[[str], str] = str,
        extra_requests: int = 0,
    ) -> None:
        """Every call answered in the next request, by the tool until the refused poll,
        which the next request answers with the refusal (the API's error flag set if
        `error_flag`); then the model's own answer (and `extra_requests` of the
        framework's own, as DSPy's answer extraction), and no call after."""
        calls = self.calls
        if self.refused_at is not None:
            calls = calls[: calls.index(("poll", {"job": "7"}, f"poll-{self.refused_at - 1}")) + 1]
        sent = server.tool_results()
        assert [r.call_id for r in sent] == [call_id for _, _, call_id in calls]
        for name, _, call_id in calls:
            result = server.result_in_next_request(call_id)
            refused = self.refused_at is not None and call_id == calls[-1][2]
            if refused:
                text = refusal(result.text)
                assert text.startswith(POLL_DENIED), text
                assert self.refused_counts in text, text
            else:
                assert ("books ingested" if name == "poll" else "noted") in result.text
            assert result.is_error == (refused and error_flag), (call_id, result)
        assert len(server.model_requests) == len(calls) + 1 + extra_requests
        assert server.errors == []

    def check_ran(self, ran: list[str]) -> None:
        """The refused poll never reached the tool."""
        polls = POLLS if self.refused_at is None else self.refused_at - 1
        assert ran.count("poll") == polls

    def drive(
        self,
        fake: type[ScriptedServer],
        as_tool: Callable[[Callable[[str], str]], Any],
        run: Callable[[ScriptedServer, list[Any]], Any],
        error_flag: bool,
        refusal: Callable[[str], str] = str,
        extra_requests: int = 0,
    ) -> None:
        """The whole scenario: `run(server, tools)` runs the framework's agent, guarded with
        `self.config`, on the tools (each function made a tool by `as_tool`) against a
        scripted `fake` server; then the wire and the tool runs are checked."""
        ran: list[str] = []
        tools = [as_tool(f) for f in self.functions(ran)]
        with fake(after=self.wire(fake.results_of)) as server:
            run(server, tools)
        self.check_wire(server, error_flag, refusal, extra_requests)
        self.check_ran(ran)


# The scenarios every framework runs; INTERLEAVED for one or two of them.
MOVING = Poller(moving=True)
FROZEN = Poller(moving=False)
INTERLEAVED = Poller(moving=False, interleaved=True)
