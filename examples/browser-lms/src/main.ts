import { parseArgs } from 'node:util';
import { buildPage } from './buildPage.js';
import { servePage } from './servePage.js';

// `pnpm example:browser-lms [--port N]`: bundles the page and serves it on loopback until interrupted.
const { values } = parseArgs({ options: { port: { type: 'string', default: '8035' } } });
const bundle = await buildPage();
const server = await servePage(Number(values.port));
console.log(`Bundled the page (${(bundle.bytes / 1024 / 1024).toFixed(1)} MiB). Open ${server.url} in a browser with WebGPU (Chrome or Chromium;`);
console.log('on a machine without a GPU, start Chromium with --enable-unsafe-webgpu). ?budget=0.4 sets the budget as a fraction of');
console.log("stock's device peak, ?predictions=5 the number of predictions, ?lms=0 leaves LMS out. Ctrl-C stops the server.");
process.on('SIGINT', () => void server.close().then(() => process.exit(0)));
