// `pnpm test:tfjs-suite [--filter name,name,…] [--out file.json] [--browser]` (names of tfjs's describeWithFlags
// blocks): runs tfjs-core's published test suite on tfjs's own WebGPU backend and on Stowage's, one after the other
// on this machine's device — in Node on Dawn, or with --browser in headless Chromium on navigator.gpu
// (BrowserSuite.ts) — and prints JSON lines: one per backend (counts and wall time), then the comparison (specs that
// pass on one backend only, with the other's failure message). With --out, both runs' full results go to that file.
// Exit code 1 when the sets differ, 2 when Chromium has no WebGPU adapter.
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { SuiteResult } from './SuiteResult.js';
import { runTfjsSuiteInChromium } from './BrowserSuite.js';
import { compareSuites, runTfjsSuite } from './TfjsSuite.js';

const { values } = parseArgs({ options: { filter: { type: 'string' }, out: { type: 'string' }, browser: { type: 'boolean' } } });
const filter = values.filter === undefined ? null : values.filter.split(',');
const where = values.browser === true ? 'chromium' : 'node';
const results: SuiteResult[] = [];
for (const backend of ['stock', 'stowage'] as const) {
  const result = where === 'chromium' ? await runTfjsSuiteInChromium(backend, { filter }) : await runTfjsSuite(backend, { filter });
  if ('unavailable' in result) {
    console.log(JSON.stringify({ backend, where, unavailable: result.unavailable }));
    process.exit(2);
  }
  results.push(result);
  const losses = 'deviceLostIn' in result ? { deviceLostIn: result.deviceLostIn } : {};
  console.log(JSON.stringify({ backend, where, adapter: result.adapter, passed: result.passed.length, failed: result.failed.length, pending: result.pending, wallMs: result.wallMs, ...losses }));
}
const [stock, stowage] = results as [SuiteResult, SuiteResult];
const difference = compareSuites(stock, stowage);
const messageOf = (result: SuiteResult, name: string): string => result.failed.find((f) => f.name === name)?.message ?? 'did not run';
console.log(
  JSON.stringify({
    comparison: 'stock vs stowage',
    samePassFailSets: difference.onlyStockPassed.length === 0 && difference.onlyStowagePassed.length === 0,
    onlyStockPassed: difference.onlyStockPassed.map((name) => ({ name, stowage: messageOf(stowage, name) })),
    onlyStowagePassed: difference.onlyStowagePassed.map((name) => ({ name, stock: messageOf(stock, name) })),
  }),
);
if (values.out !== undefined) writeFileSync(values.out, JSON.stringify({ stock, stowage }, null, 1));
process.exitCode = difference.onlyStockPassed.length + difference.onlyStowagePassed.length === 0 ? 0 : 1;
