// Test-only DSH plugin: copies every DSH log message (warnings included) to a JSONL file,
// so tests can assert what the circuit-breaker plugin logged. DSH's SDK profile keeps its
// log in memory only.
import { appendFileSync } from 'node:fs';
import { format } from 'node:util';

export const name = 'test-log-capture';

export function apply(ctx, config) {
  ctx.logger.exporter({
    levels: { default: 3 },
    colors: 0,
    export(message) {
      try {
        const record = { type: message.type, name: message.name, text: format(...message.args) };
        appendFileSync(config.path, JSON.stringify(record) + '\n');
      } catch {
        // a test helper must not disturb the runtime
      }
    },
  });
}
