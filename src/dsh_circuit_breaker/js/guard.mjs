// dsh-circuit-breaker: the one guard client for every JavaScript plugin harness.
//
// Plain ESM, no dependencies, no build step; shipped as package data beside the
// harness adapters (./dsh.mjs and the others), which only map their harness's
// calls to `Guard.check` and its answer back to their harness's refusal. The rules and
// their config live in Python: the client starts one guard process
// (`python -c PROGRAM serve --stdio`) and asks it, over newline-delimited
// JSON, before every tool call.
//
// Failure policy: a guard that is missing, dies, or does not answer within `timeoutMs`
// never blocks the agent: the call is allowed and a warning goes to the harness's log.
// `timeoutMs` defaults to the guard's own `storeTimeout` plus a margin, so a store that
// is slow (a SQLite lock held by another process) is waited for, not taken for a dead
// guard; a guard that misses one answer is kept (its late answer proves it alive), one
// that stays silent through a second is hung. A guard that died or hung is restarted
// once per runtime; after that, calls are allowed unchecked. A bad config is the one
// loud failure: `startGuard` throws `ConfigFailure` naming the key.
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, existsSync } from 'node:fs';
import { dirname, join, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

// Keys the client reads itself; every other key is the breaker's, validated in Python.
export const OWN_KEYS = ['python', 'timeoutMs', 'startTimeoutMs', 'state'];
const DEFAULT_TIMEOUT_MS = 1000;
// Over the guard's storeTimeout: Python's own answer after a store's full budget.
const TIMEOUT_MARGIN_MS = 1000;
const DEFAULT_START_TIMEOUT_MS = 10000;
const UNCHECKED_REPORT_EVERY = 100;
// Allowed calls whose result is awaited (the oldest forgotten past this: a harness that
// reports no result for some calls, a tool that threw, must not grow the map).
const MAX_RUNNING = 256;

export class ConfigFailure extends Error {}

// The program the command hook runs too (invocation.HOOK_PROGRAM, a test keeps the two
// equal). Not `-m`: that puts the working directory, the user's project, first on
// sys.path, so a project's own `keyword.py` or `operator.py` would be imported (and run)
// in place of the standard module; the program takes that entry out before any import.
const PROGRAM = 'import sys; sys.path[:] = [p for p in sys.path if p]; '
  + 'from dsh_circuit_breaker.cli import main; sys.exit(main())';

// Validate the plugin's config, start the guard and wait for its hello. Resolves to
// {guard, config} (config: the breaker's effective keys as the guard reports them);
// throws ConfigFailure for a bad config. `python` is the adapter's own guess (a sidecar
// file, say) before the client's (env, then the venv this file is installed in).
// `logger` has `warn(format, ...args)`. `hello`: more fields for the guard's hello, e.g.
// `{harness, configFile}` to have the guard read its config as that harness's command
// hook would (see guard/stdio.py).
export async function startGuard({ config, logger, python, pluginFile, label = 'dsh-circuit-breaker', hello = {} }) {
  const options = config ?? {};
  if (typeof options !== 'object' || Array.isArray(options)) {
    throw new ConfigFailure(`${label}: config must be a mapping, got ${typeof options}`);
  }
  const breakerConfig = {};
  for (const [key, value] of Object.entries(options)) {
    if (!OWN_KEYS.includes(key)) breakerConfig[key] = value;
  }
  const guard = new Guard({
    python: findPython(options, python),
    hello: { ...hello, op: 'hello', config: breakerConfig, state: options.state ?? null },
    timeoutMs: positive(options.timeoutMs, 'timeoutMs', undefined, label),
    startTimeoutMs: positive(options.startTimeoutMs, 'startTimeoutMs', DEFAULT_START_TIMEOUT_MS, label),
    logger,
    pluginFile,
  });
  const started = await guard.start();
  if (started.configError !== undefined) {
    guard.stop();
    throw new ConfigFailure(`${label}: ${started.configError}`);
  }
  return { guard, config: { ...breakerConfig, ...(started.config ?? {}) } };
}

function positive(value, key, fallback, label) {
  if (value === undefined || value === null) return fallback;
  if (typeof value !== 'number' || !(value > 0)) {
    throw new ConfigFailure(`${label}: config key ${key}: must be a number above 0, got ${JSON.stringify(value)}`);
  }
  return value;
}

// Which Python runs the guard: the config's `python`, $DSH_CIRCUIT_BREAKER_PYTHON, the
// adapter's guess, the venv this file is installed in, else python3 on PATH.
function findPython(options, adapterGuess) {
  if (typeof options.python === 'string' && options.python !== '') return options.python;
  const fromEnv = process.env.DSH_CIRCUIT_BREAKER_PYTHON;
  if (fromEnv) return fromEnv;
  let guess;
  try {
    guess = typeof adapterGuess === 'function' ? adapterGuess() : adapterGuess;
  } catch {
    // An unreadable hint falls through to the next guess; the guard start reports it.
  }
  if (typeof guess === 'string' && guess !== '') return guess;
  // Installed (not editable) into a venv: .../lib/pythonX.Y/site-packages/dsh_circuit_breaker/js/
  const here = dirname(fileURLToPath(import.meta.url));
  const marker = `${sep}lib${sep}`;
  const at = here.lastIndexOf(marker);
  if (at > 0 && here.includes(`${sep}site-packages${sep}`)) {
    const candidate = join(here.slice(0, at), process.platform === 'win32' ? 'Scripts' : 'bin', 'python');
    if (existsSync(candidate)) return candidate;
  }
  return process.platform === 'win32' ? 'python' : 'python3';
}

// `startGuard` for an adapter whose guard loads its config as that harness's command hook
// would (guard/stdio.py: the config file, the harness's exempt spellings, the incident log and
// the state store). `options`: what the loader (or the harness's own plugin options)
// passes: `harness` and `configFile` go into the hello, every other key is `config` (the
// client's own keys, and breaker keys that override the file's).
export function startAsHook({ options, harness, logger, pluginFile }) {
  const { harness: named = harness, configFile = null, ...config } = options ?? {};
  return startGuard({ config, logger, pluginFile, hello: { harness: named, configFile } });
}

// `startAsHook`'s config check alone, synchronously, for a harness whose plugin must
// register synchronously (OpenClaw): one guard process answers the hello and exits (its
// stdin closes). Returns the breaker's effective keys; throws ConfigFailure for a bad
// config. A guard that cannot start is no config error: the keys as given, and the
// asynchronous start reports it.
export function checkAsHook({ options, harness, pluginFile, label = 'dsh-circuit-breaker' }) {
  const { harness: named = harness, configFile = null, ...config } = options ?? {};
  const breakerConfig = {};
  for (const [key, value] of Object.entries(config)) {
    if (!OWN_KEYS.includes(key)) breakerConfig[key] = value;
  }
  const hello = { op: 'hello', id: 1, harness: named, configFile, config: breakerConfig, state: config.state ?? null };
  const timeout = positive(config.startTimeoutMs, 'startTimeoutMs', DEFAULT_START_TIMEOUT_MS, label);
  const python = findPython(config);
  const done = spawnSync(python, ['-c', PROGRAM, 'serve', '--stdio'], {
    input: JSON.stringify(hello) + '\n',
    encoding: 'utf8',
    timeout,
    maxBuffer: 1024 * 1024,
    windowsHide: true,
  });
  let reply;
  try {
    reply = JSON.parse(String(done.stdout ?? '').split('\n')[0]);
  } catch {
    return breakerConfig;
  }
  // For doctor: the check is this plugin's first start (`start: 0`; the guard's own follow).
  const error = reply?.ok === false ? String(reply.error ?? 'the guard rejected its config') : undefined;
  readyMarker({ start: 0, ok: reply?.ok === true, pid: done.pid ?? null, python, config: reply?.config, error, pluginFile });
  if (error !== undefined) throw new ConfigFailure(`${label}: ${error}`);
  return reply?.ok === true ? { ...breakerConfig, ...(reply.config ?? {}) } : breakerConfig;
}

// The decision an adapter hands its harness: a refusal (`{message, stop, stopReason}`, as
// `Guard.check`), or undefined to allow.
// `read()` returns [agentRef, tool, args] from the harness's call. Never throws: trouble
// in reading the call allows it (pi, for one, blocks a call whose handler throws).
// `callId`: the harness's id for the call, given where the adapter reports its result
// (`Guard.resultOf`): an allowed call is kept under it till then.
export async function decide(guard, logger, read, callId) {
  try {
    const call = read();
    const refusal = await guard.check(...call);
    if (refusal === undefined && callId !== undefined) guard.ran(callId, call);
    return refusal;
  } catch (error) {
    logger.warn('dsh-circuit-breaker: internal error, call allowed: %s', String(error));
    return undefined;
  }
}

// The text of a result made of content blocks (pi's and DSH's, as MCP's): the text blocks
// in order, other blocks by their type, and whether it failed.
export function blocksText(content, isError) {
  const parts = Array.isArray(content) ? content : [];
  const text = parts.map((block) => (block?.type === 'text' ? String(block.text) : `[${block?.type}]`));
  return [isError === true ? 'error:' : 'ok:', ...text].join('\n');
}

// resetOnUserPrompt (default true), read from `startGuard`'s config: the guard's effective
// keys, or the keys as given when the guard did not start.
export function resetsOnUserPrompt(config) {
  return (config.resetOnUserPrompt ?? config.reset_on_user_prompt) !== false;
}

// Whether a config (`startGuard`'s, or the hello reply's) observes results: either key of
// docs/results.md. An adapter hooks its harness's after-tool event only then.
export function observesResults(config) {
  return config?.resultProgress === true || config?.sameResultLimit > 0;
}

// For `dsh-circuit-breaker doctor`: proof that a plugin really activated (`pluginFile`:
// the adapter that started the guard).
function readyMarker(record) {
  const path = process.env.DSH_CIRCUIT_BREAKER_READY_FILE;
  if (!path) return;
  try {
    appendFileSync(path, JSON.stringify(record) + '\n');
  } catch {
    // Only the doctor reads this; it reports a missing marker itself.
  }
}

// Per-agent identity sent to the guard. DSH's agent object carries `id`, the session id
// that `list_agents` / `interrupt_agent` use (a subagent has its own). An agent without
// one gets a private key for its object and is reported by its field names (`agentKeys`).
// When an agent object is collected, its state is dropped, as a WeakMap would.
export class AgentKeys {
  constructor(notify) {
    this.notify = notify;
    this.anon = new WeakMap();
    this.serial = 0;
    this.seen = new WeakSet();
    this.liveById = new Map();
    this.registry = new FinalizationRegistry((held) => this.collected(held));
  }

  of(agent) {
    if (agent === null || typeof agent !== 'object') return { anon: 'anon:none', agentKeys: [] };
    const id = agent.id;
    if ((typeof id === 'string' && id !== '') || (typeof id === 'number' && Number.isFinite(id))) {
      const key = String(id);
      if (!this.seen.has(agent)) {
        this.seen.add(agent);
        this.liveById.set(key, new WeakRef(agent));
        this.registry.register(agent, { agent: key });
      }
      return { agent: key };
    }
    let key = this.anon.get(agent);
    if (key === undefined) {
      key = `anon:${++this.serial}`;
      this.anon.set(agent, key);
      this.registry.register(agent, { anon: key });
    }
    return { anon: key, agentKeys: Object.keys(agent) };
  }

  collected(held) {
    if (held.agent !== undefined) {
      // A resumed session may already run as a new object with the same id: keep its state.
      const live = this.liveById.get(held.agent);
      if (live !== undefined && live.deref() !== undefined) return;
      this.liveById.delete(held.agent);
    }
    this.notify({ op: 'forget', ...held });
  }
}

// The guard process and the pending requests to it. `check` resolves to a denial reason
// or undefined (allow), never rejects, and waits at most `timeoutMs` for an answer (plus
// up to `startTimeoutMs` for a guard that is starting).
export class Guard {
  constructor({ python, hello, timeoutMs, startTimeoutMs, logger, pluginFile }) {
    this.python = python;
    this.pluginFile = pluginFile ?? fileURLToPath(import.meta.url);
    this.hello = hello;
    this.ownTimeout = timeoutMs; // undefined: follow the guard's storeTimeout
    this.timeoutMs = timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.silent = false; // a request timed out and no reply has come since
    this.startTimeoutMs = startTimeoutMs;
    this.logger = logger;
    this.child = null;
    this.ready = null; // promise of the running guard's hello reply
    this.starts = 0;
    this.gaveUp = false;
    this.unchecked = 0;
    this.nextId = 1;
    this.pending = new Map();
    this.stopped = false;
    this.lastFailure = undefined;
    this.observing = false; // the guard's config observes results (its hello says)
    this.running = new Map(); // call id -> its [agentRef, tool, args JSON], till its result
  }

  // Start (or restart) the process and wait for its hello reply. Resolves to
  // {ok, config} or {ok: false, configError} or {ok: false, failure}; never rejects.
  start() {
    this.starts += 1;
    const args = ['-c', PROGRAM, 'serve', '--stdio'];
    let child;
    try {
      child = spawn(this.python, args, { stdio: ['pipe', 'pipe', 'pipe'], windowsHide: true });
    } catch (error) {
      const why = `cannot start ${this.python}: ${error.message}`;
      this.child = null;
      this.trouble(why, null);
      this.ready = Promise.resolve({ ok: false, failure: why });
      return this.ready;
    }
    this.child = child;
    // The guard must never keep DSH alive; it exits by itself when its stdin closes.
    child.unref();
    for (const stream of [child.stdin, child.stdout, child.stderr]) stream?.unref?.();
    let buffer = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk) => {
      buffer += chunk;
      let newline;
      while ((newline = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 1);
        this.answer(line);
      }
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      for (const line of chunk.split('\n')) {
        if (line.trim() !== '') this.logger.warn('dsh-circuit-breaker guard: %s', line);
      }
    });
    child.stdin.on('error', () => {}); // reported through 'exit' / timeouts instead
    child.on('error', (error) => this.lost(child, `guard process error: ${error.message}`));
    child.on('exit', (code, signal) => this.lost(child, `guard process exited (${signal ?? `code ${code}`})`));

    const start = this.starts;
    const hello = this.request(this.hello, this.startTimeoutMs).then((reply) => {
      let result;
      if (reply === undefined) {
        // Either it died (already reported, with the reason) or it never answered.
        const why = child === this.child ? `guard did not start within ${this.startTimeoutMs} ms` : this.lastFailure;
        this.trouble(why, child);
        result = { ok: false, failure: why };
      } else if (reply.ok === true) {
        result = { ok: true, config: reply.config };
        this.observing = observesResults(reply.config);
        const store = reply.config?.storeTimeout;
        if (this.ownTimeout === undefined && typeof store === 'number' && store > 0) {
          this.timeoutMs = Math.max(DEFAULT_TIMEOUT_MS, store * 1000 + TIMEOUT_MARGIN_MS);
        }
      } else {
        result = { ok: false, configError: String(reply.error ?? 'the guard rejected its config') };
      }
      readyMarker({
        start,
        ok: result.ok,
        pid: child.pid ?? null,
        python: this.python,
        config: result.config,
        error: result.configError ?? result.failure,
        pluginFile: this.pluginFile,
      });
      return result;
    });
    this.ready = hello;
    return hello;
  }

  stop() {
    this.stopped = true;
    this.kill('SIGTERM'); // it also exits by itself when its stdin closes
  }

  // Let go of the running guard. A guard that failed is killed outright: one that is
  // hung (or stopped) would not act on a polite signal.
  kill(signal = 'SIGKILL') {
    const child = this.child;
    this.child = null;
    this.ready = null;
    this.silent = false;
    for (const [, waiter] of this.pending) waiter(undefined);
    this.pending.clear();
    if (child !== null) {
      try {
        child.stdin.end();
        child.kill(signal);
      } catch {
        // already gone
      }
    }
  }

  // One decision: undefined allows; a refusal is `{message, stop, stopReason}`, where `stop`
  // asks the adapter to end the agent, if its harness lets it (`stopReason` says why).
  async check(agentRef, tool, args) {
    if (this.gaveUp || this.stopped) return this.uncheckedCall();
    if (this.child === null) {
      if (this.starts >= 2) return this.giveUp();
      this.logger.warn('dsh-circuit-breaker: restarting the guard process (the one restart)');
      this.start();
    }
    const child = this.child;
    // Resolved at once unless a (re)start is under way; a start gets its own budget, since
    // a Python start-up takes far longer than an answer.
    const hello = await withTimeout(this.ready, this.startTimeoutMs);
    if (hello === undefined) {
      this.trouble(`guard not ready within ${this.startTimeoutMs} ms`, child);
      return this.uncheckedCall(true);
    }
    if (hello.ok !== true) return this.uncheckedCall(true); // reported when it failed
    let reply;
    try {
      reply = await this.request({ op: 'check', tool, arguments: args, ...agentRef }, this.timeoutMs);
    } catch {
      // Arguments JSON cannot carry (a cycle, a BigInt): the breaker could not judge them.
      return undefined;
    }
    if (reply === undefined && child === this.child && !this.silent) {
      // Late, not necessarily dead: this call goes unchecked, the guard stays.
      this.silent = true;
      this.logger.warn(
        'dsh-circuit-breaker: guard did not answer within %d ms; the call is allowed, the guard is kept',
        this.timeoutMs,
      );
      return this.uncheckedCall(true);
    }
    if (reply === undefined) {
      this.trouble(`guard did not answer within ${this.timeoutMs} ms, twice in a row`, child);
      return this.uncheckedCall(true);
    }
    if (reply.allowed !== false || typeof reply.message !== 'string') return undefined;
    const stop = reply.stop === true && typeof reply.stopReason === 'string';
    return { message: reply.message, stop, stopReason: stop ? reply.stopReason : undefined };
  }

  // An allowed call `[agentRef, tool, args]` ran (or is about to) under the harness's id
  // `callId`: keep it, as the check sent it, for its result. Only with a config that
  // observes results: otherwise this costs nothing.
  ran(callId, [agentRef, tool, args]) {
    if (!this.observing) return;
    let json;
    try {
      // As JSON now: another plugin may rewrite the arguments in place before the tool runs.
      json = JSON.stringify(args ?? null);
    } catch {
      return; // arguments the check could not send either
    }
    this.running.delete(callId);
    if (this.running.size >= MAX_RUNNING) this.running.delete(this.running.keys().next().value);
    this.running.set(callId, [agentRef, tool, json]);
  }

  // The result of the call kept under `callId` (`ran`) came: report it. `result()` makes
  // it (text, or any JSON value), only when there is a call to report it for.
  resultOf(callId, result) {
    const call = this.running.get(callId);
    if (call === undefined) return;
    this.running.delete(callId);
    const [agentRef, tool, argsJson] = call;
    let made;
    try {
      made = result();
    } catch (error) {
      this.logger.warn('dsh-circuit-breaker: internal error, result not recorded: %s', String(error));
      return;
    }
    this.sendResult(agentRef, tool, argsJson, made);
  }

  // What an allowed call returned, for the guard's resultProgress and sameResultLimit
  // (docs/results.md); `args` as `check` got them. Fire and forget: never waits, never
  // throws, nothing sent unless the config observes results.
  observe(agentRef, tool, args, result) {
    let json;
    try {
      json = JSON.stringify(args ?? null);
    } catch {
      return;
    }
    this.sendResult(agentRef, tool, json, result);
  }

  sendResult(agentRef, tool, argsJson, result) {
    const child = this.child;
    if (!this.observing || child === null) return;
    try {
      const rest = JSON.stringify({ op: 'result', ...agentRef, tool, result });
      child.stdin.write(`{"arguments":${argsJson},${rest.slice(1)}\n`);
    } catch {
      // A result JSON cannot carry (a cycle, a BigInt), or a guard just gone: no record.
    }
  }

  // Fire and forget (agent disposal).
  notify(message) {
    const child = this.child;
    if (child === null) return;
    try {
      child.stdin.write(JSON.stringify(message) + '\n');
    } catch {
      // a dead guard forgets everything anyway
    }
  }

  // Send one request; resolves to its reply, or undefined on timeout or a dead guard.
  // Throws synchronously only when `message` cannot be serialized.
  request(message, budgetMs) {
    const id = this.nextId++;
    const line = JSON.stringify({ ...message, id }) + '\n';
    const child = this.child;
    if (child === null) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      // This timer is what keeps the host alive while it waits for us: the guard's pipes
      // are unreferenced, and a host with nothing else to do (pi in print mode, awaiting
      // a tool call) would otherwise exit mid-call.
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve(undefined);
      }, budgetMs);
      this.pending.set(id, (reply) => {
        clearTimeout(timer);
        resolve(reply);
      });
      try {
        child.stdin.write(line);
      } catch {
        this.pending.get(id)?.(undefined);
        this.pending.delete(id);
      }
    });
  }

  answer(line) {
    let reply;
    try {
      reply = JSON.parse(line);
    } catch {
      return;
    }
    this.silent = false; // any reply, even a late one, shows the guard is alive
    const waiter = this.pending.get(reply?.id);
    if (waiter === undefined) return; // late reply after a timeout
    this.pending.delete(reply.id);
    waiter(reply);
  }

  lost(child, why) {
    this.trouble(why, child);
  }

  // The guard `child` failed: drop it (the next call restarts it, once) and say so.
  // Reports each process's failure once: later reports about a process we already
  // dropped (its exit after a timeout, other calls that were waiting on it) are ignored.
  trouble(why, child) {
    if (this.stopped || child !== this.child) return;
    const last = this.starts >= 2;
    const next = last ? 'all further tool calls are allowed unchecked' : 'it will be restarted once';
    this.lastFailure = why;
    this.logger.warn('dsh-circuit-breaker: %s; the call is allowed, %s', why, next);
    this.kill();
    if (last) this.gaveUp = true;
  }

  giveUp() {
    this.gaveUp = true;
    return this.uncheckedCall();
  }

  uncheckedCall(alreadyReported = false) {
    this.unchecked += 1;
    if (!alreadyReported && this.unchecked % UNCHECKED_REPORT_EVERY === 1) {
      this.logger.warn(
        'dsh-circuit-breaker: guard unavailable, tool call allowed unchecked (%d so far)',
        this.unchecked,
      );
    }
    return undefined;
  }
}

function withTimeout(promise, ms) {
  if (promise === null) return Promise.resolve(undefined);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms); // referenced, as in `request`
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      () => {
        clearTimeout(timer);
        resolve(undefined);
      },
    );
  });
}
