import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename } from 'node:path';

export interface BrowserBundleServer {
  /** The page's address, http://127.0.0.1:PORT/ (a secure context, so navigator.gpu is exposed). */
  readonly url: string;
  /** Stops listening and drops open connections. Idempotent. */
  close(): Promise<void>;
}

/** The HTML page that loads the bundle as a module, titled `title` (its HTML-special characters escaped). */
function pageOf(bundleFile: string, title: string): string {
  const escaped = title.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
  return `<!doctype html>
<meta charset="utf-8">
<title>${escaped}</title>
<link rel="icon" href="data:,">
<script type="module" src="/${encodeURIComponent(bundleFile)}"></script>
`;
}

/**
 * Serves, on a random loopback port, a page at `/` that loads the bundle as a module, and the bundle at
 * `/<its file name>`; every other path is 404. The bundle is read on each request.
 */
export async function serveBrowserBundle(bundlePath: string, title = 'Stowage browser checks'): Promise<BrowserBundleServer> {
  const bundleFile = basename(bundlePath);
  const page = pageOf(bundleFile, title);
  const server = createServer((request, response) => {
    if (request.url === '/') {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
    } else if (request.url === `/${encodeURIComponent(bundleFile)}`) {
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
