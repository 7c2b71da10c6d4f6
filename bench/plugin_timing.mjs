// Bench-only plugins for pi, OpenCode and Kilo: a pair of timers around the breaker. The
// harness runs its tool-call handlers in load order; one timer loads before the breaker
// ("before"), one after it ("after"), so after - before is what the breaker's handler
// took for that call (without the breaker: the harness's own step between two handlers).
// Times are kept in memory and written when the process exits, so that writing them is
// not timed.
import { spawn } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';

function recorder(role) {
  const path = process.env.BENCH_TIMING_FILE;
  const rows = [];
  process.on('exit', () => appendFileSync(path, rows.join('')));
  return (callId) => rows.push(`${role}\t${callId}\t${process.hrtime.bigint()}\n`);
}

export function piTiming(role) {
  return function (pi) {
    const record = recorder(role);
    pi.on('tool_call', (event) => {
      record(event.toolCallId);
      return undefined;
    });
  };
}

export function openCodeTiming(role) {
  const server = async () => {
    const record = recorder(role);
    return { 'tool.execute.before': async (input) => record(input.callID) };
  };
  return { id: `bench-timing-${role}`, server };
}

// In place of the breaker, a plugin that only waits, as any plugin that does I/O must:
// `timeout` (a zero timer), `fs` (reading /dev/null) or `pipe` (a line through `cat`). What
// it costs between the same timers is the harness's own price for a hook that waits.
export function openCodeWaiter(mode) {
  const server = async () => {
    const cat = mode === 'pipe' ? spawn('cat', [], { stdio: ['pipe', 'pipe', 'ignore'] }) : null;
    const wait = {
      timeout: () => new Promise((resolve) => setTimeout(resolve, 0)),
      fs: () => readFile('/dev/null'),
      pipe: () =>
        new Promise((resolve) => {
          cat.stdout.once('data', resolve);
          cat.stdin.write('x\n');
        }),
    }[mode];
    return { 'tool.execute.before': async () => wait() };
  };
  return { id: `bench-waiter-${mode}`, server };
}
