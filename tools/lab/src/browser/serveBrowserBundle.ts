import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { basename, extname } from 'node:path';

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

/** Content types of the files a page loads besides its bundle (WebAssembly must be application/wasm to stream). */
const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json; charset=utf-8',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * Serves, on a random loopback port, a page at `/` that loads the bundle as a module, the bundle at
 * `/<its file name>`, and each of `files` (URL path, such as `/ort/ort-wasm-simd-threaded.asyncify.wasm`, to an
 * absolute file path: the WebAssembly and model files a page loads, never from the network); every other path is
 * 404. Files are read on each request.
 */
export async function serveBrowserBundle(bundlePath: string, title = 'Stowage browser checks', files: Readonly<Record<string, string>> = {}): Promise<BrowserBundleServer> {
  const bundleFile = basename(bundlePath);
  const page = pageOf(bundleFile, title);
  const served = new Map<string, string>([[`/${encodeURIComponent(bundleFile)}`, bundlePath]]);
  for (const [path, file] of Object.entries(files)) served.set(path, file);
  const server = createServer((request, response) => {
    const file = served.get((request.url ?? '').split('?')[0]!);
    if (request.url === '/') {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(page);
    } else if (file !== undefined) {
      readFile(file).then(
        (body) => response.writeHead(200, { 'content-type': CONTENT_TYPES[extname(file)] ?? 'application/octet-stream' }).end(body),
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
