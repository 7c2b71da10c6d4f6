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

  async function api(path, options) {
    const response = await fetch(path, Object.assign({ headers, cache: "no-store" }, options));
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.status + " " + path);
    return body;
  }

  function agentRow(agent) {
    const row = el("tr", null, "agent");
    row.dataset.agent = agent.agent;
    if (agent.agent === selected) row.classList.add("selected");
    const status = el("td");
    status.appendChild(el("span", agent.status, "badge " + agent.status));
    row.appendChild(status);
    const who = el("td", null, "id");
    who.appendChild(el("span", agent.session));
    if (agent.subagent) who.appendChild(el("span", " / " + agent.subagent, "sub"));
    row.appendChild(who);
    row.appendChild(el("td", agent.harness || "-"));
    row.appendChild(el("td", agent.cap ? agent.calls + "/" + agent.cap : agent.calls, "num"));
    row.appendChild(el("td", agent.topRepeat + "/" + agent.duplicateLimit, "num"));
    row.appendChild(el("td", agent.denials === null ? "-" : agent.denials, "num"));
    row.appendChild(el("td", agent.lastTool || "-", "id"));
    row.appendChild(el("td", when(agent.updated)));
    const cell = el("td");
    const button = el("button", "reset", "reset");
    button.title = "forget this agent's state: its next call starts afresh";
    button.addEventListener("click", (event) => { event.stopPropagation(); reset(agent.agent); });
    cell.appendChild(button);
    row.appendChild(cell);
    row.addEventListener("click", () => { selected = agent.agent; refresh(); });
    return row;
  }

  async function refreshAgents() {
    const data = await api("/api/agents");
    $("state").textContent = data.state;
    $("count").textContent = data.total;
    const body = $("agents");
    body.replaceChildren(...data.agents.map(agentRow));
    if (!data.agents.length) {
      const row = el("tr");
      const cell = el("td", "no agents yet", "empty");
      cell.colSpan = 9;
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
    for (const event of data.timeline) {
      const cell = el("span", null, "cell" + (event.reset ? " reset" : event.allowed ? "" : " deny"));
      cell.title = event.reset
        ? when(event.time) + " reset (" + event.reset + ")"
        : when(event.time) + " " + event.tool + " " + outcome(event);
      cells.appendChild(cell);
    }
    for (const event of data.timeline.slice(-50).reverse()) {
      const row = el("tr");
      row.appendChild(el("td", when(event.time)));
      row.appendChild(el("td", event.reset ? "(reset: " + event.reset + ")" : event.tool, "id"));
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
      item.appendChild(el("span", incident.agent || "(no id)", "id sub"));
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
      $("error").textContent = error.message;
    } finally {
      busy = false;
    }
  }

  refresh();
  setInterval(refresh, POLL_MS);
})();
