"""The page a browser gets for the live page's address without the token: HTML that says
how to get the token, where the API's JSON `{"error": ...}` would be a dead end."""

from __future__ import annotations

from html import escape


def page(token_file: str, env: str) -> bytes:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>dsh-circuit-breaker: token needed</title>
<meta name="referrer" content="no-referrer"></head>
<body style="font: 15px/1.5 system-ui, sans-serif; max-width: 44em; margin: 3em auto">
<h1>The live page needs the guard's token</h1>
<p>Open the address <code>dsh-circuit-breaker serve --http</code> printed when it started
(it ends in <code>/?token=...</code>), or add the token to this address yourself:</p>
<pre>cat {escape(token_file)}</pre>
<p>(a guard started with <code>--token</code> or <code>${escape(env)}</code> uses that one
instead). The token is the only thing that keeps other programs on this machine from
reading and resetting your agents: keep it out of shared places.</p>
</body></html>
""".encode()
