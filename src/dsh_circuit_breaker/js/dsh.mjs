// dsh-circuit-breaker: DeepSeek Harness plugin.
//
// Plain ESM, no dependencies, no build step: DSH's wiring around the shared guard client
// (./guard.mjs), which holds the guard process and its failure policy. Installed by
// `dsh-circuit-breaker install dsh`; configured by the entry's `config` (the breaker's
// keys, camelCase, plus the client's own keys: python, timeoutMs, startTimeoutMs, state).
// Docs: docs/dsh.md in the project.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import {
  AgentKeys,
  blocksText,
  decide,
  observesResults,
  resetsOnUserPrompt,
  startGuard,
} from './guard.mjs';

export const name = 'dsh-circuit-breaker';
export const inject = ['tools'];

const SIDECAR = 'dsh-circuit-breaker.json';

export async function apply(ctx, config) {
  const logger = ctx.logger('circuit-breaker');
  const { guard, config: effective } = await startGuard({
    config,
    logger,
    python: () => sidecarPython(ctx),
    pluginFile: fileURLToPath(import.meta.url),
  });
  ctx.effect(() => () => guard.stop(), 'dsh-circuit-breaker guard process');

  const agents = new AgentKeys((message) => guard.notify(message));
  // A denial is final: remember which executions we denied, and deny them again in the
  // monotonic guard stage, which runs after the whole pre-execute waterfall and which no
  // listener can override, in case a listener wrapped around us rewrote our deny.
  const denied = new WeakMap();
  // Refusals that also stop the agent: the stop text, until the call's result is final.
  const stopping = new WeakMap();

  ctx.on('tools/pre-execute', async (exec, next) => {
    const read = () => [agents.of(exec.agent), exec.name, exec.arguments];
    const refusal = await decide(guard, logger, read, exec);
    if (refusal === undefined) return next();
    const reason = refusal.message;
    denied.set(exec, reason);
    if (refusal.stop) stopping.set(exec, refusal.stopReason);
    return { kind: 'deny', reason };
  });
  ctx.tools.guard((exec) => denied.get(exec));

  // What an allowed call returned: the dispatch's own result (its content blocks), before
  // any listener replaces it (a spilled output's notice names a new file every time), only
  // where the config observes results. The call is known by its execution object: the
  // one our pre-execute stage judged.
  if (observesResults(effective)) {
    ctx.on('tools/post-execute', (exec, result, next) => {
      guard.resultOf(exec, () => blocksText(result?.content, result?.isError));
      return next();
    });
  }

  // Stop the agent once the refused call's result (our deny) is final, so the model's
  // history keeps the refusal: DSH's `tools/result` runs after the whole pipeline, before
  // the agent takes its next step. `agent.cancel` with a `hook` cause is how DSH's own
  // plugins end a running turn (its account sign-out does the same); the turn ends
  // `aborted` with our text as its reason, and no further model request is made.
  ctx.on('tools/result', (exec) => {
    const reason = stopping.get(exec);
    if (reason === undefined) return;
    stopping.delete(exec);
    try {
      exec.agent.cancel({ kind: 'hook', reason }, { keepInbox: true });
    } catch (error) {
      logger.warn('dsh-circuit-breaker: could not stop the agent (its call was refused): %s', String(error));
    }
  });

  // resetOnUserPrompt (default true): a new prompt from the user starts the agent afresh,
  // as in the breaker's other integrations. DSH puts each prompt into the agent's inbox
  // with source kind `user`; tool results and messages from other agents are not that.
  if (resetsOnUserPrompt(effective)) {
    ctx.on('agent/inbox/inserted', (payload) => {
      try {
        if (payload?.message?.source?.kind !== 'user') return;
        const agent = payload.agent;
        if (agent !== null && typeof agent === 'object') guard.notify({ op: 'forget', ...agents.of(agent) });
      } catch (error) {
        logger.warn('dsh-circuit-breaker: could not reset on a user prompt: %s', String(error));
      }
    });
  }
}

// A later patch row `- id: circuit-breaker` with `config:` replaces the whole config (DSH
// does not merge it), so the interpreter that `install dsh` put in the row may be gone:
// it is also in a sidecar file beside the profile's patch layer.
function sidecarPython(ctx) {
  const profileDir = ctx.get('profileContext')?.dir;
  if (typeof profileDir !== 'string') return undefined;
  const sidecar = join(profileDir, SIDECAR);
  if (!existsSync(sidecar)) return undefined;
  return JSON.parse(readFileSync(sidecar, 'utf8')).python;
}
