// The shared guard client's round trip alone, outside any harness: `Guard.check` on new
// calls, each after an idle gap (as between real tool calls), with the interpreter given.
//
//   node bench/guard_roundtrip.mjs PYTHON [GAP_MS] [CALLS]
//   BUN_BE_BUN=1 tests/e2e/node_modules/opencode-ai/bin/opencode.exe \
//     bench/guard_roundtrip.mjs PYTHON
//
// (A Bun-compiled binary such as OpenCode's runs a script as `bun` would with BUN_BE_BUN=1.)
import { startGuard } from '../src/dsh_circuit_breaker/js/guard.mjs';

const [python, gapArg = '80', callsArg = '100'] = process.argv.slice(2);
const gap = Number(gapArg);
const calls = Number(callsArg);
const logger = { warn: (...args) => console.error(...args) };
const { guard } = await startGuard({ config: { python }, logger });
const times = [];
for (let i = 0; i < calls; i++) {
  if (gap) await new Promise((resolve) => setTimeout(resolve, gap));
  const started = process.hrtime.bigint();
  await guard.check({ agent: 'bench' }, 'bash', { command: `echo ${i}` });
  times.push(Number(process.hrtime.bigint() - started) / 1000);
}
guard.stop();
times.sort((a, b) => a - b);
const at = (p) => times[Math.min(times.length - 1, Math.floor(p * times.length))].toFixed(0);
const runtime = typeof Bun === 'undefined' ? `node ${process.version}` : `bun ${Bun.version}`;
const summary = `median ${at(0.5)} us, p90 ${at(0.9)} us, p99 ${at(0.99)} us`;
console.log(`${runtime}: ${calls} calls, ${gap} ms apart: ${summary}`);
