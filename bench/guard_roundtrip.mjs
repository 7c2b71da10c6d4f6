// The shared guard client's round trip alone, outside any harness: `Guard.check` on new
// calls, each after an idle gap (as between real tool calls), with the interpreter given.
//
//   node bench/guard_roundtrip.mjs PYTHON [GAP_MS] [CALLS] [results|off] [STATE]
//   BUN_BE_BUN=1 tests/e2e/node_modules/opencode-ai/bin/opencode.exe \
//     bench/guard_roundtrip.mjs PYTHON
//
// (A Bun-compiled binary such as OpenCode's runs a script as `bun` would with BUN_BE_BUN=1.)
// `results`: with resultProgress, each call's result is reported after its check, as the
// adapters do from their after-tool event; the report's own time (what the host's event
// waits) is printed too. `off`: results off (resultProgress false, sameResultLimit 0, named
// whatever the default). STATE: the guard's state URL (default: memory).
import { startGuard } from '../src/dsh_circuit_breaker/js/guard.mjs';

const [python, gapArg = '80', callsArg = '100', mode = '', state] = process.argv.slice(2);
const gap = Number(gapArg);
const calls = Number(callsArg);
const results = mode === 'results';
const logger = { warn: (...args) => console.error(...args) };
const keys = { results: { resultProgress: true }, off: { resultProgress: false, sameResultLimit: 0 } };
const config = { python, ...(keys[mode] ?? {}), ...(state ? { state } : {}) };
const { guard } = await startGuard({ config, logger });
const times = [];
const reports = [];
for (let i = 0; i < calls; i++) {
  if (gap) await new Promise((resolve) => setTimeout(resolve, gap));
  const call = [{ agent: 'bench' }, 'bash', { command: `echo ${i}` }];
  const started = process.hrtime.bigint();
  await guard.check(...call);
  const checked = process.hrtime.bigint();
  times.push(Number(checked - started) / 1000);
  if (results) {
    guard.observe(...call, `${i}\n`);
    reports.push(Number(process.hrtime.bigint() - checked) / 1000);
  }
}
guard.stop();
const at = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))].toFixed(0);
};
const summary = (values) =>
  `median ${at(values, 0.5)} us, p90 ${at(values, 0.9)} us, p99 ${at(values, 0.99)} us`;
const runtime = typeof Bun === 'undefined' ? `node ${process.version}` : `bun ${Bun.version}`;
const what = { results: ', results on', off: ', results off' }[mode] ?? '';
console.log(`${runtime}: ${calls} calls, ${gap} ms apart${what}: ${results ? 'check ' : ''}${summary(times)}`);
if (results) console.log(`  result report (the after-tool event's wait): ${summary(reports)}`);
