"""The resident guard: one long-lived process that judges hook events over HTTP
(`serve --http`), so a harness with HTTP hooks starts no process per tool call, and that
shows a person supervising the agents what the breaker is doing (a live page, JSON and
Prometheus metrics).

- `service`: the guard itself: the harness modules' translation over one store;
- `http`: the HTTP transport and its security checks; `cli`: `serve --http` itself;
- `token`: the shared secret every request carries;
- `metrics`: counters and a latency histogram in Prometheus' text format;
- `ensure`: starting the service once per session when it is not answering;
- `page.html`, `page.js`: the live page, plain HTML and JavaScript (package data).
"""
