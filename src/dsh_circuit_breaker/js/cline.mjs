// dsh-circuit-breaker: Cline CLI plugin.
//
// Plain ESM, no dependencies, no build step: Cline's wiring around the shared guard client
// (./guard.mjs), which holds the guard process and its failure policy. `dsh-circuit-breaker
// install cline` writes a small loader into Cline's plugins directory
// (~/.cline/plugins/dsh-circuit-breaker.js) that calls `circuitBreaker({...})` with the
// interpreter, and the config file and state given to install; the guard reads the config
// as the command hooks do. Docs: docs/cline.md in the project.
import { fileURLToPath } from 'node:url';
import { format } from 'node:util';

import { decide, startAsHook } from './guard.mjs';

// Cline gives a plugin's setup about 4 s (its import budget) and each hook 3 s; a guard
// that starts slower is waited for by the first tool call instead.
const SETUP_WAIT_MS = 2500;

// `options`: what the loader passes (`harness`, `python`, `configFile`, `state`; see
// guard.mjs's startAsHook).
export function circuitBreaker(options = {}) {
  let logger = { warn: (...args) => process.stderr.write(format(...args) + '\n') };
  let starting = null; // promise of {guard, config}, or of null once the start failed
  let failure = null; // why it failed (a bad config), until reported
  let inSetup = false;

  // Resolves to the running guard, or to null (every call allowed): never rejects.
  function running() {
    starting ??= startAsHook({
      options,
      harness: 'cline',
      logger: { warn: (...args) => logger.warn(...args) },
      pluginFile: fileURLToPath(import.meta.url),
    }).catch((error) => {
      failure = error;
      if (!inSetup) report();
      return null;
    });
    return starting;
  }

  function report() {
    logger.warn('%s; tool calls are allowed unchecked', failure?.message ?? String(failure));
  }

  return {
    name: 'dsh-circuit-breaker',
    manifest: { capabilities: ['hooks'] },

    async setup(_api, ctx) {
      if (typeof ctx?.logger?.log === 'function') {
        const host = ctx.logger;
        logger = { warn: (...args) => host.log(format(...args), { severity: 'warn' }) };
      }
      // A bad config fails the plugin's setup, which Cline reports; the run goes on
      // unguarded. A guard still starting is left to the first tool call.
      inSetup = true;
      const timer = new Promise((resolve) => setTimeout(resolve, SETUP_WAIT_MS).unref?.());
      await Promise.race([running(), timer]);
      inSetup = false;
      if (failure !== null) throw failure;
    },

    hooks: {
      // A run of the main agent starts with a prompt typed by a person: with
      // resetOnUserPrompt (the default) the agent starts afresh. A subagent's runs are
      // its parent's delegations, and the run Cline starts by itself to hand the lead
      // its teammates' reports is no prompt of the person's either.
      async beforeRun({ snapshot } = {}) {
        if (snapshot?.parentAgentId || isTeamUpdates(snapshot)) return undefined;
        const ready = await running();
        const reset = ready?.config.resetOnUserPrompt ?? ready?.config.reset_on_user_prompt;
        const agent = agentKey(snapshot);
        if (ready && reset !== false && agent.agent) ready.guard.notify({ op: 'forget', ...agent });
        return undefined;
      },

      // `skip` refuses this one call: the model gets `{"error": <reason>}` as its result.
      async beforeTool({ snapshot, tool, toolCall, input } = {}) {
        const ready = await running();
        if (!ready) return undefined;
        const name = toolCall?.toolName ?? tool?.name;
        if (typeof name !== 'string' || name === '') return undefined;
        const read = () => [agentKey(snapshot), name, input ?? toolCall?.input];
        const refusal = await decide(ready.guard, logger, read, toolCall?.toolCallId);
        return refusal === undefined ? undefined : answer(refusal);
      },

      // What an allowed call returned, sent only where the config observes results
      // (`Guard.ran` kept nothing otherwise). Cline awaits this hook: it only queues a line.
      async afterTool({ toolCall, result } = {}) {
        const ready = await running();
        ready?.guard.resultOf(toolCall?.toolCallId, () => outputText(result));
        return undefined;
      },
    },
  };
}

export default circuitBreaker();

// A refusal that stops also carries Cline's `stop`, which ends this agent's run before any
// call of the batch runs, with `reason` as the run's error (Cline 3.0.65 reads `stop`
// before `skip`, so `reason` is the stop text, for the person; the model is not asked
// again). `skip` stays: the call never runs, even for a Cline that ignored `stop`.
function answer({ message, stop, stopReason }) {
  return stop ? { skip: true, reason: stopReason, stop: true } : { skip: true, reason: message };
}

// Cline (3.0.65, agent teams on by default) goes on with the lead by itself once a run ends
// while its async teammates work: a new run, whose prompt is this notice, wrapped as a typed
// prompt is (`<user_input mode="act">...`). Resetting there restarted the lead's count.
const TEAM_UPDATES = 'System-delivered teammate async run updates:';

function isTeamUpdates(snapshot) {
  const last = snapshot?.messages?.at?.(-1);
  if (last?.role !== 'user') return false;
  const parts = Array.isArray(last.content) ? last.content : [{ type: 'text', text: last.content }];
  const text = parts.map((part) => (part?.type === 'text' && typeof part.text === 'string' ? part.text : '')).join('');
  return text.replace(/^<user_input\b[^>]*>/, '').startsWith(TEAM_UPDATES);
}

// A tool's result as Cline gives it to hooks: whether it failed, and its output (text, or
// JSON for the structured outputs of run_commands and the file tools).
function outputText(result) {
  const output = result?.output ?? null;
  const text = typeof output === 'string' ? output : JSON.stringify(output);
  return `${result?.isError === true ? 'error:' : 'ok:'}\n${text}`;
}

// The main agent by its agent id; a subagent (spawn_agent) as `parent/agent`.
function agentKey(snapshot) {
  const id = snapshot?.agentId;
  if (typeof id !== 'string' || id === '') return { anon: 'anon:none', agentKeys: [] };
  const parent = snapshot.parentAgentId;
  return { agent: typeof parent === 'string' && parent !== '' ? `${parent}/${id}` : id };
}
