// Bench-only DSH plugin: times the rest of the `tools/pre-execute` waterfall from this
// listener on (every listener registered after it, plus DSH's default). Loaded before the
// circuit-breaker entry, it measures what the breaker adds to each tool call.
import { appendFileSync } from 'node:fs';

export const name = 'bench-pre-execute-timing';

export function apply(ctx, config) {
  ctx.on('tools/pre-execute', async (exec, next) => {
    const started = process.hrtime.bigint();
    const decision = await next();
    const micros = Number(process.hrtime.bigint() - started) / 1000;
    appendFileSync(config.path, `${exec.name}\t${decision?.kind}\t${micros.toFixed(1)}\n`);
    return decision;
  });
}
