// Bench-only plugins for pi, OpenCode and Kilo: a pair of timers around the breaker. The
// harness runs its tool-call handlers in load order; one timer loads before the breaker
// ("before"), one after it ("after"), so after - before is what the breaker's handler
// took for that call (without the breaker: the harness's own step between two handlers).
// Times are kept in memory and written when the process exits, so that writing them is
// not timed.
import { appendFileSync } from 'node:fs';

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
