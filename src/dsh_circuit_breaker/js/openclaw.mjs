// dsh-circuit-breaker: OpenClaw (openclaw) plugin.
//
// Plain ESM, no dependencies, no build step: OpenClaw's wiring around the shared guard
// client (./guard.mjs). `dsh-circuit-breaker install openclaw` writes a small loader beside
// openclaw.json (dsh-circuit-breaker.mjs), names it in `plugins.load.paths` and enables it in
// `plugins.entries`; the loader calls `circuitBreaker({...})` with the interpreter, and the
// config file and state given to install, and the guard reads the config as the command
// hooks do. Docs: docs/openclaw.md in the project.
import { fileURLToPath } from 'node:url';
import { format } from 'node:util';

import { checkAsHook, decide, observesResults, resetsOnUserPrompt, startAsHook } from './guard.mjs';

const ID = 'dsh-circuit-breaker';
// One guard per OpenClaw process and install: OpenClaw evaluates a plugin and calls its
// `register` more than once per start (2026.9.6: once in "full" mode, twice in
// "discovery" mode, and the hooks that fire are the last registration's).
const SHARED = Symbol.for('dsh-circuit-breaker.openclaw');

export function circuitBreaker(options = {}) {
  return {
    id: ID,
    name: 'dsh-circuit-breaker',
    description: 'Loop guard: refuses a tool call the agent repeated too often, caps calls, enforces per-tool budgets, ends a run that ignores refusals.',
    // OpenClaw wants `register` synchronous; it fails the whole start when it throws, which
    // is how a bad config is reported (checkAsHook asks the guard once, synchronously).
    register(api) {
      const shared = sharedGuard(options, api.logger);
      const { config } = shared;
      api.on('before_tool_call', async (event, ctx) => {
        const guard = await shared.guard();
        if (guard === undefined) return undefined;
        const read = () => [agentOf(ctx), event.toolName, event.params];
        const refusal = await decide(guard, shared.logger, read, event.toolCallId);
        if (refusal === undefined) return undefined;
        if (refusal.stop) await stopRun(ctx, refusal.stopReason, shared.logger);
        return { block: true, blockReason: refusal.message };
      });
      // What an allowed call returned (its content blocks; an error is a failed call), only
      // where the config observes results. A blocked call has an after event too: no result
      // is kept for it (`decide` kept only the allowed calls).
      if (observesResults(config)) {
        api.on('after_tool_call', async (event) => {
          const guard = await shared.guard();
          guard?.resultOf(event?.toolCallId, () => resultText(event));
        });
      }
      // A prompt the user typed starts a run (trigger "user"); a heartbeat, a cron job or
      // another session's message to this one (typed provenance, not "external_user") does
      // not. Needs `hooks.allowConversationAccess`, which install sets.
      if (resetsOnUserPrompt(config)) {
        api.on('before_prompt_build', async (event, ctx) => {
          if (ctx?.trigger !== 'user') return undefined;
          const kind = ctx?.inputProvenance?.kind;
          if (kind !== undefined && kind !== 'external_user') return undefined;
          const agent = agentOf(ctx);
          if (agent.agent === undefined) return undefined;
          const guard = await shared.guard();
          guard?.notify({ op: 'forget', ...agent });
          return undefined;
        });
      }
    },
  };
}

export default circuitBreaker();

function sharedGuard(options, hostLogger) {
  const key = JSON.stringify(options);
  const all = (globalThis[SHARED] ??= new Map());
  let shared = all.get(key);
  if (shared !== undefined) return shared;
  const logger = new Warnings(hostLogger);
  const pluginFile = fileURLToPath(import.meta.url);
  // Throws ConfigFailure (naming the key) for a bad config.
  const config = checkAsHook({ options, harness: 'openclaw', pluginFile });
  let starting = null;
  shared = {
    config,
    logger,
    // The running guard, started at the first call; undefined once it could not start
    // (every call then allowed, with a warning).
    guard() {
      starting ??= startAsHook({ options, harness: 'openclaw', logger, pluginFile }).then(
        (started) => started.guard,
        (error) => {
          logger.warn('%s; tool calls are allowed unchecked', String(error?.message ?? error));
          return undefined;
        },
      );
      return starting;
    },
  };
  all.set(key, shared);
  return shared;
}

// The agent is the session (its id; a subagent runs in a child session of its own).
function agentOf(ctx) {
  const id = ctx?.sessionId ?? ctx?.sessionKey;
  if (typeof id === 'string' && id !== '') return { agent: id };
  return { anon: 'anon:openclaw-no-session', agentKeys: [] };
}

// The breaker stops the agent: abort the session's run (the plugin SDK's
// abortAgentHarnessRun, which OpenClaw resolves for the plugins it loads). The refused call
// still gets its refusal as its result; the run then ends as "agent run aborted" before the
// next model request. Without that SDK the call is refused and the run goes on.
async function stopRun(ctx, reason, logger) {
  logger.warn('%s', reason);
  const session = ctx?.sessionId;
  if (typeof session !== 'string' || session === '') return;
  try {
    const sdk = await import('openclaw/plugin-sdk/agent-harness');
    if (!sdk.abortAgentHarnessRun(session)) logger.warn('dsh-circuit-breaker: no run to stop for this session');
  } catch (error) {
    logger.warn('dsh-circuit-breaker: could not stop the run: %s', String(error));
  }
}

// A result as the model gets it: its text blocks (other blocks by type), and whether the
// call failed (OpenClaw's `error`, or `details.status` "error").
function resultText(event) {
  const content = Array.isArray(event?.result?.content) ? event.result.content : [];
  const text = content.map((block) => (block?.type === 'text' ? String(block.text) : `[${block?.type}]`));
  const failed = event?.error !== undefined || event?.result?.details?.status === 'error';
  return [failed ? 'error:' : 'ok:', ...text].join('\n');
}

// Warnings go to OpenClaw's log (its console output in `openclaw agent --local`).
class Warnings {
  constructor(host) {
    this.host = host;
  }

  warn(template, ...args) {
    const text = format(template, ...args);
    try {
      this.host.warn(text);
    } catch {
      process.stderr.write(`${text}\n`);
    }
  }
}
