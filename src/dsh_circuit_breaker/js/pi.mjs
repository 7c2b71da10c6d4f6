// dsh-circuit-breaker: pi (@mariozechner/pi-coding-agent) extension.
//
// Plain ESM, no dependencies, no build step: pi's wiring around the shared guard client
// (./guard.mjs). `dsh-circuit-breaker install pi` writes a small loader into
// ~/.pi/agent/extensions/ that calls `circuitBreaker({...})` with the interpreter, and the
// config file and state given to install; the guard reads the config as the command hooks
// do. Loaded directly (`pi -e .../pi.mjs`), it finds the interpreter itself.
// Docs: docs/pi.md in the project.
import { fileURLToPath } from 'node:url';
import { format } from 'node:util';

import { blocksText, decide, observesResults, resetsOnUserPrompt, startAsHook } from './guard.mjs';

export function circuitBreaker(options = {}) {
  return async function dshCircuitBreaker(pi) {
    const logger = new Warnings();
    // A bad config throws here: pi reports the extension as failed to load.
    const { guard, config: effective } = await startAsHook({
      options,
      harness: 'pi',
      logger,
      pluginFile: fileURLToPath(import.meta.url),
    });
    pi.on('session_shutdown', () => guard.stop());

    // pi has no subagents: the agent is the session (its id is the incident log's agent).
    pi.on('tool_call', async (event, ctx) => {
      logger.ui = ctx?.hasUI ? ctx.ui : undefined;
      const read = () => [sessionOf(ctx), event.toolName, event.input];
      const refusal = await decide(guard, logger, read, event.toolCallId);
      if (refusal === undefined) return undefined;
      if (refusal.stop) stopRun(ctx, refusal.stopReason, logger);
      return { block: true, reason: refusal.message };
    });

    // What an allowed call returned (its content blocks, as the handlers before us left
    // them), only where the config observes results: pi runs no `tool_result` stage for an
    // extension that has no handler for it.
    if (observesResults(effective)) {
      pi.on('tool_result', (event) => {
        guard.resultOf(event?.toolCallId, () => blocksText(event.content, event.isError));
        return undefined;
      });
    }

    // A prompt the user typed (or sent over RPC) starts the session afresh; one that an
    // extension injected (`source: "extension"`) does not.
    if (resetsOnUserPrompt(effective)) {
      pi.on('input', (event, ctx) => {
        if (event?.source === 'extension') return undefined;
        try {
          guard.notify({ op: 'forget', ...sessionOf(ctx) });
        } catch (error) {
          logger.warn('dsh-circuit-breaker: could not reset on a user prompt: %s', String(error));
        }
        return undefined;
      });
    }
  };
}

export default circuitBreaker();

// The breaker stops the agent: end pi's run, and say why. `ctx.abort()` only aborts the
// run's signal (pi drops the promise of its wait for the agent to go idle, which could not
// settle before this handler returns); the block we return is still this call's result,
// since pi's loop makes it from our answer without looking at the signal, and the next
// model request then ends as "aborted" before it is sent.
function stopRun(ctx, reason, logger) {
  try {
    ctx.abort();
  } catch (error) {
    logger.warn('dsh-circuit-breaker: could not stop the run: %s', String(error));
  }
  logger.warn('%s', reason);
}

function sessionOf(ctx) {
  const id = ctx.sessionManager.getSessionId();
  if (typeof id === 'string' && id !== '') return { agent: id };
  return { anon: 'anon:pi-session', agentKeys: [] };
}

// Warnings go to pi's UI when it has one (stderr would tear the TUI), else to stderr.
class Warnings {
  constructor() {
    this.ui = undefined;
  }

  warn(template, ...args) {
    const text = format(template, ...args);
    if (this.ui !== undefined) {
      try {
        this.ui.notify(text, 'warning');
        return;
      } catch {
        // fall through to stderr
      }
    }
    process.stderr.write(`${text}\n`);
  }
}
