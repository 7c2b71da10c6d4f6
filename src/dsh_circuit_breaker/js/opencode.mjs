// dsh-circuit-breaker: OpenCode (opencode-ai) and Kilo Code (@kilocode/cli) server plugin.
//
// Plain ESM, no dependencies, no build step: the wiring around the shared guard client
// (./guard.mjs). `dsh-circuit-breaker install opencode` (or `kilo`) writes a small loader
// into the harness's global plugin directory that calls `circuitBreaker({...})` with the
// harness's name, the interpreter, and the config file and state given to install; the
// guard reads the config as that harness's command hook would. Named in a `plugin` list
// instead (`["/abs/.../opencode.mjs", {options}]`), the options are the same keys, and
// breaker keys among them override the config file's.
// Docs: docs/opencode.md and docs/kilo.md in the project.
import { fileURLToPath } from 'node:url';
import { format } from 'node:util';

import { decide, observesResults, resetsOnUserPrompt, startAsHook } from './guard.mjs';

const ID = 'dsh-circuit-breaker';

export function circuitBreaker(recorded = {}) {
  async function server(input, options) {
    const logger = new Warnings(input?.client);
    // A bad config throws here: the harness logs the plugin as failed to load.
    const { guard, config: effective } = await startAsHook({
      options: { ...recorded, ...(options ?? {}) },
      harness: 'opencode',
      logger,
      pluginFile: fileURLToPath(import.meta.url),
    });
    // The agent is the session: a subagent runs in a child session (with a `parentID`) of
    // its own, so a looping child is refused while its parent is not.
    const children = new Set();
    // Sessions the breaker stopped (id -> why), until their next prompt.
    const stopped = new Map();
    const hooks = {
      'tool.execute.before': async (call, output) => {
        const read = () => [sessionOf(call), call.tool, output.args];
        const refusal = await decide(guard, logger, read, call.callID);
        if (refusal === undefined) return;
        if (refusal.stop && typeof call.sessionID === 'string') {
          stopped.set(call.sessionID, refusal.stopReason);
          logger.warn('%s', refusal.stopReason);
        }
        // The harness turns a thrown error into the tool's error result, with this text.
        throw new Error(refusal.message);
      },
      // Before each model request of a session. A stopped session's next request fails
      // here, unsent, with why: the harness ends the run with that error (a subagent's
      // task fails with it, and its parent goes on). Not `client.session.abort()` from the
      // refused call: that raced the recording of the refusal, and the run then ended with
      // a bare "Aborted" ("Task cancelled" for a subagent).
      'chat.params': async (request) => {
        const reason = stopped.get(request?.sessionID);
        if (reason !== undefined) throw new Error(reason);
      },
      event: async ({ event }) => {
        const info = event?.properties?.info;
        if (event?.type === 'session.created' && info?.parentID) children.add(info.id);
      },
      dispose: async () => guard.stop(),
    };
    // What an allowed call returned (its output text), only where the config observes
    // results. Not `output.title`: the task tool's, and Kilo's bash's, is the call's
    // `description`, which ignoreArgs drops from the key; a frozen poll described anew each
    // time made progress with it. A tool that throws has no after event: no result.
    if (observesResults(effective)) {
      hooks['tool.execute.after'] = async (call, output) => {
        guard.resultOf(call?.callID, () => String(output?.output ?? ''));
      };
    }
    // A new prompt starts a new run: a stopped session may go on. In a top-level session
    // the prompt is the user's, which resets the session (resetOnUserPrompt); a child
    // session's prompt is its parent's task, which does not.
    const resets = resetsOnUserPrompt(effective);
    hooks['chat.message'] = async (message) => {
      const id = message?.sessionID;
      if (typeof id !== 'string' || id === '') return;
      stopped.delete(id);
      if (resets && !children.has(id)) guard.notify({ op: 'forget', agent: id });
    };
    return hooks;
  }
  return { id: ID, server };
}

export default circuitBreaker();

function sessionOf(call) {
  const id = call.sessionID;
  if (typeof id === 'string' && id !== '') return { agent: id };
  return { anon: 'anon:no-session', agentKeys: [] };
}

// Warnings go to the harness's own log (its log file; `--print-logs` shows them on
// stderr), where writing to stderr would tear its TUI.
class Warnings {
  constructor(client) {
    this.client = client;
  }

  warn(template, ...args) {
    const message = format(template, ...args);
    try {
      const sent = this.client.app.log({ body: { service: ID, level: 'warn', message } });
      sent?.catch?.(() => process.stderr.write(`${message}\n`));
    } catch {
      process.stderr.write(`${message}\n`);
    }
  }
}
