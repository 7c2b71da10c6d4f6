"use strict";
// The live page: polls the guard's JSON API with the token it was opened with. Text from
// harnesses (agent ids, tool names) only ever goes into textContent, never into markup.
(function () {
  const POLL_MS = 500;
  const token = new URLSearchParams(location.search).get("token") || "";
  const headers = { Authorization: "Bearer " + token };
  let selected = null;
  let incidentOffset = null;
  const incidents = [];

  function $(id) { return document.getElementById(id); }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (className) node.className = className;
    return node;
  }

  function when(seconds) {
    if (!seconds) return "-";
    return new Date(seconds * 1000).toISOString().replace(/\.\d+Z$/, "Z");
  }

  function ago(seconds) {
    if (!seconds) return "-";
    const gone = Math.max(0, Date.now() / 1000 - seconds);
    if (gone < 60) return Math.floor(gone) + " s ago";
    if (gone < 3600) return Math.floor(gone / 60) + " min ago";
    if (gone < 86400) return Math.floor(gone / 3600) + " h ago";
    return Math.floor(gone / 86400) + " days ago";
  }

  // Stopped first, then capped and denied: what a supervisor must look at, at the top.
  const RANK = { stopped: 0, capped: 1, denied: 2, ok: 3 };
  const NEXT = {
    stopped: "refused stopAfterDenials times in a row: its harness was told to end it. " +
      "Read its transcript for what it was trying; a reset forgets its state, so a session " +
      "that goes on starts afresh.",
    capped: "reached maxCallsPerAgent: every call is refused. A reset gives it a new budget; " +
      "a subagent (no user prompt resets it) needs one to run again.",
    denied: "its last call, or its next repeat, is refused: the model was told why and " +
      "usually changes course. Watch its timeline; reset only if the refusal was wrong.",
    ok: "nothing to do.",
  };

  // How a person interrupts an agent, where its harness has a key for it.
  const INTERRUPT = {
    "claude-code": "press Esc in its Claude Code session",
    "gemini-cli": "press Esc in its Gemini CLI session",
    "qwen-code": "press Esc in its Qwen Code session",
    codex: "press Esc in its Codex session",
    droid: "press Esc in its droid session",
    copilot: "press Esc in its Copilot CLI session",
  };
  const TODO = {
    stopped: "refused stopAfterDenials times in a row; its harness was told to end it.",
    capped: "used up maxCallsPerAgent: every call is refused.",
    denied: "refused a repeat; the model was told why and usually changes course.",
  };

  function repeated(agent) {
    const r = agent.repeat;
    if (!r || (!r.ran && !r.refused) || r.ran + r.refused < 2) return agent.lastTool || "-";
    const what = r.preview ? r.preview : r.tool;
    return what + " x" + r.ran + " ran" + (r.refused ? ", x" + r.refused + " refused" : "");
  }

  async function api(path, options) {
    const response = await fetch(path, Object.assign({ headers, cache: "no-store" }, options));
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.status + " " + path);
    return body;
  }

  // One line cut to its cell's width, the whole text on hover.
  function cut(tag, text, className, full) {
    const node = el(tag, text, "cut" + (className ? " " + className : ""));
    node.title = full === undefined ? String(text) : full;
    return node;
  }

  function agentRow(agent) {
    const row = el("tr", null, "agent");
    row.dataset.agent = agent.agent;
    if (agent.agent === selected) row.classList.add("selected");
    const status = el("td");
    status.appendChild(el("span", agent.status, "badge " + agent.status));
    row.appendChild(status);
    // Named by its project (the last part of its working directory) and harness: a
    // person with five terminals knows which one this is; the id is below, for reset.
    const who = el("td");
    const name = el("div", null, "named");
    name.title = (agent.cwd ? agent.cwd : "no working directory given") +
      (agent.harness ? " (" + agent.harness + ")" : "");
    name.appendChild(el("span", agent.project || "(project unknown)", "project"));
    name.appendChild(el("span", agent.harness || "harness unknown", "harness"));
    who.appendChild(name);
    const id = el("div", null, "id cut");
    id.title = agent.agent;
    id.appendChild(el("span", agent.session));
    if (agent.subagent) id.appendChild(el("span", " / " + agent.subagent, "sub"));
    who.appendChild(id);
    row.appendChild(who);
    row.appendChild(el("td", agent.cap ? agent.calls + "/" + agent.cap : agent.calls, "num"));
    row.appendChild(el("td", agent.topRepeat + "/" + agent.duplicateLimit, "num"));
    row.appendChild(el("td", agent.denials === null ? "-" : agent.denials, "num"));
    const repeat = el("td", null, "repeat");
    const call = repeated(agent);
    repeat.appendChild(cut("span", call, "id", call + (agent.lastTool ? " (tool: " + agent.lastTool + ")" : "")));
    row.appendChild(repeat);
    const last = el("td", ago(agent.updated), "last");
    last.title = when(agent.updated);
    row.appendChild(last);
    const cell = el("td");
    cell.appendChild(resetButton(agent, "reset"));
    row.appendChild(cell);
    row.addEventListener("click", () => { selected = agent.agent; refresh(); });
    return row;
  }

  function resetButton(agent, label) {
    const button = el("button", label, "reset");
    button.title = "forget this agent's state: its next call starts afresh";
    button.addEventListener("click", (event) => {
      event.stopPropagation();
      if (confirm("Reset " + agent.agent + "? Its state is forgotten: its next call starts " +
                  "afresh (a stopped agent may run again).")) reset(agent.agent);
    });
    return button;
  }

  // For a refused, capped or stopped agent: what to do, in its own row under it.
  function todoRow(agent) {
    const row = el("tr", null, "todo " + agent.status);
    row.dataset.agent = agent.agent;
    const cell = el("td");
    cell.colSpan = 8;
    cell.appendChild(el("span", "What to do: ", "what"));
    cell.appendChild(el("span", TODO[agent.status] + " "));
    const how = INTERRUPT[agent.harness];
    if (agent.status !== "stopped") {
      cell.appendChild(el("span", "If it keeps on, " +
        (how ? how : "interrupt it in its terminal") + ". "));
    }
    if (agent.transcript) {
      cell.appendChild(el("span", "Its transcript: "));
      cell.appendChild(el("code", agent.transcript, "transcript"));
      cell.appendChild(el("span", ". "));
    } else {
      cell.appendChild(el("span", "Its harness gave no transcript path. "));
    }
    cell.appendChild(resetButton(agent, "reset here"));
    cell.appendChild(el("span", agent.status === "denied"
      ? " only if the refusal was wrong." : " to let it run again, with a changed task."));
    row.appendChild(cell);
    return row;
  }

  async function refreshAgents() {
    const data = await api("/api/agents");
    $("state").textContent = data.state;
    $("count").textContent = data.total;
    const body = $("agents");
    const agents = data.agents.slice().sort((a, b) => RANK[a.status] - RANK[b.status]);
    body.replaceChildren(...agents.flatMap((agent) => {
      if (agent.status === "ok") return [agentRow(agent)];
      const row = agentRow(agent);
      row.classList.add("todo-above");
      return [row, todoRow(agent)];
    }));
    const attention = agents.filter((a) => a.status !== "ok");
    const banner = $("attention");
    banner.hidden = !attention.length;
    banner.className = attention.some((a) => a.status === "stopped") ? "loud" : "";
    banner.textContent = attention.length === 1 ? "1 agent needs attention"
      : attention.length + " agents need attention";
    const chosen = agents.find((a) => a.agent === selected);
    $("next").textContent = chosen ? chosen.status + ": " + NEXT[chosen.status] : "";
    if (!data.agents.length) {
      const row = el("tr");
      const cell = el("td", "no agents yet", "empty");
      cell.colSpan = 8;
      row.appendChild(cell);
      body.appendChild(row);
    }
  }

  async function refreshTimeline() {
    const box = $("timeline");
    $("timeline-agent").textContent = selected || "";
    if (!selected) return;
    const data = await api("/api/agents/" + encodeURIComponent(selected));
    const cells = el("div", null, "cells");
    const rows = el("tbody");
    const outcome = (event) => (event.allowed ? "ran" : "denied: " + event.kind + (event.stop ? ", stop" : ""));
    const named = (event) => event.tool + (event.call ? ": " + event.call : "");
    // A run of identical calls (same tool, same outcome) is one cell with its count: a
    // capped agent would otherwise show 200 cells alike.
    const runs = [];
    for (const event of data.timeline) {
      const key = event.reset ? "reset" : named(event) + " (" + outcome(event) + ")";
      const run = runs[runs.length - 1];
      if (run && run.key === key && !event.reset) run.events.push(event);
      else runs.push({ key, events: [event] });
    }
    for (const run of runs) {
      const event = run.events[0];
      const n = run.events.length;
      const cell = el("span", n > 1 ? "x" + n : null,
        "cell" + (event.reset ? " reset" : event.allowed ? "" : " deny") + (n > 1 ? " run" : ""));
      cell.title = event.reset
        ? when(event.time) + " reset (" + event.reset + ")"
        : when(event.time) + " " + run.key + (n > 1 ? " (" + n + " times in a row)" : "");
      cells.appendChild(cell);
    }
    for (const event of data.timeline.slice(-50).reverse()) {
      const row = el("tr");
      const time = el("td", when(event.time).slice(11));  // the day is on hover
      time.title = when(event.time);
      row.appendChild(time);
      const what = event.reset ? "(reset: " + event.reset + ")" : named(event);
      const name = el("td", null, "id");
      name.appendChild(cut("span", what));
      row.appendChild(name);
      row.appendChild(el("td", event.reset ? "" : outcome(event)));
      row.appendChild(el("td", event.reset ? "" : event.count + "/" + event.limit, "num"));
      rows.appendChild(row);
    }
    const table = el("table");
    table.appendChild(rows);
    const seen = data.timeline.length
      ? data.timeline.length + " events seen by this service"
      : "no calls through this service yet (command hooks count in the store only)";
    const note = el("p", data.agent ? seen : seen + "; not in the store now (reset or expired)",
      data.timeline.length ? "sub" : "empty");
    box.replaceChildren(cells, note, table);
  }

  async function refreshIncidents() {
    const query = incidentOffset === null ? "" : "?after=" + incidentOffset;
    const data = await api("/api/incidents" + query);
    incidentOffset = data.offset;
    if (!data.incidents.length && incidents.length) return;
    incidents.push(...data.incidents);
    const list = $("incidents");
    if (!incidents.length) {
      list.replaceChildren(el("li", data.log ? "none yet" : "the incident log is off", "empty"));
      return;
    }
    list.replaceChildren(...incidents.slice(-200).reverse().map((incident) => {
      const item = el("li");
      item.appendChild(el("span", incident.time + " "));
      item.appendChild(el("span", incident.kind, "kind"));
      item.appendChild(el("span", " " + incident.tool + " " + incident.count + "/" + incident.limit + " "));
      const who = el("a", incident.agent || "(no id)", "id sub");
      if (incident.agent) {
        who.href = "#";
        who.addEventListener("click", (event) => {
          event.preventDefault();
          selected = String(incident.agent);
          refresh();
        });
      }
      item.appendChild(who);
      return item;
    }));
  }

  async function reset(agent) {
    try {
      await api("/api/agents/" + encodeURIComponent(agent) + "/reset", { method: "POST" });
    } catch (error) {
      $("error").textContent = "reset failed: " + error.message;
    }
    refresh();
  }

  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      await Promise.all([refreshAgents(), refreshTimeline(), refreshIncidents()]);
      $("updated").textContent = new Date().toISOString().replace(/\.\d+Z$/, "Z");
      $("error").textContent = "";
    } catch (error) {
      // fetch rejects with a TypeError when nothing answers: say what to do about it.
      $("error").textContent = error instanceof TypeError
        ? "guard not reachable at " + location.origin + ": start it with " +
          "`dsh-circuit-breaker serve --http " + location.host + "` (or restart the harness " +
          "session: `install ... --http` starts it)"
        : error.message;
    } finally {
      busy = false;
    }
  }

  refresh();
  setInterval(refresh, POLL_MS);
})();
