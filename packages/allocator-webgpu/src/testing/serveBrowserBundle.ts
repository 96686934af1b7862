import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { BROWSER_CHECKS_FILE } from './buildBrowserChecks.js';

/** A page that loads the bundle as a module; the bundle defines `window.runStowageBrowserChecks`. */
const PAGE = `<!doctype html>
<meta charset="utf-8">
<title>Stowage WebGPU browser checks</title>
<link rel="icon" href="data:,">
<script type="module" src="/${BROWSER_CHECKS_FILE}"></script>
`;

export interface BrowserChecksServer {
  /** The page's address, http://127.0.0.1:PORT/ (a secure context, so navigator.gpu is exposed). */
  readonly url: string;
  /** Stops listening and drops open connections. Idempotent. */
  close(): Promise<void>;
}

/**
 * Serves the page at `/` and the bundle at `/stowage-webgpu-checks.js` on a random loopback port; every other
 * path is 404. The bundle is read on each request.
 */
export async function serveBrowserChecks(bundlePath: string): Promise<BrowserChecksServer> {
  const server = createServer((request, response) => {
    if (request.url === '/') {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(PAGE);
    } else if (request.url === `/${BROWSER_CHECKS_FILE}`) {
      readFile(bundlePath).then(
        (body) => response.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(body),
        (error: Error) => response.writeHead(500, { 'content-type': 'text/plain' }).end(error.message),
      );
    } else {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  let closed: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${port}/`,
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}
