"""The kernel: what a command hook runs for one tool call, and nothing else. Config and
its file, keys, state, rules, the breaker, results, the stores the hook opens, incidents,
the refusal and stop texts, telemetry, and the leaves they stand on (`cjson`, `files`,
`_log`).

A harness starts a new Python process for every tool call and waits for it, so each
module imported here is paid for on every call, hundreds of times in a looping agent.
That is why these modules, and only they and the few modules above them on the hook's
path (`cli`, `hook`, `judge`, the registry and each command-hook harness's module,
`tests/test_layers.py` names them), use three speed tricks:

- `TYPE_CHECKING = False` then `if TYPE_CHECKING:`: the names of `typing` and of our own
  modules used only in annotations, without importing `typing` (it costs more than a
  decision) or a module the call does not run;
- an import inside the function that needs it, for a path an allowed call does not take
  (a denial's text, the incident log, a store other than SQLite, an error's report);
- the C parts of the standard library (`_json`, `_sqlite3`, `_blake2`) where the Python
  modules in front of them import more than they give.

`tests/test_hook.py` pins the modules an allowed call imports, and `bench/hook_latency.py`
measures what a call costs. Every module outside the kernel imports plainly at its top,
but for the three that start a plugin's guard or an MCP relay, where a client waits too
(`tests/test_layers.py`'s STARTS).
"""
