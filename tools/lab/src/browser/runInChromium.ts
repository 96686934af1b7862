import type { Browser } from 'playwright-core';
import { launchChromium } from './launchChromium.js';
import { serveBrowserBundle } from './serveBrowserBundle.js';

export interface RunInChromiumOptions {
  /** The page's title. Default 'Stowage browser checks'. */
  readonly title?: string;
  /** How long the page's function may run, in milliseconds. Default 120 000. */
  readonly timeoutMs?: number;
  /** What the page's function is called with (plain JSON: it crosses into the page through `page.evaluate`). */
  readonly args?: readonly unknown[];
  /** Files the page loads besides the bundle: URL path to absolute file path (see `serveBrowserBundle`). */
  readonly files?: Readonly<Record<string, string>>;
}

export interface ChromiumRun<Report> {
  /** What the page's function resolved to: plain JSON, as it crosses from the page through `page.evaluate`. */
  readonly report: Report;
  /** The page's uncaught errors and `console.error` messages, in order, to explain a failed check. */
  readonly pageErrors: readonly string[];
}

/**
 * Serves the bundle and `files` on loopback (`serveBrowserBundle`), launches headless Chromium (`launchChromium`), opens the
 * page, waits up to 10 s for the bundle to define the global function `functionName`, calls it with `args` (none
 * by default) and resolves to what it resolved to. Closes the browser and the server whether it succeeds or not.
 * @throws when Chromium does not launch, the function is not defined in time, it rejects, or it runs past
 * `timeoutMs`
 */
export async function runInChromium<Report>(bundlePath: string, functionName: string, options: RunInChromiumOptions = {}): Promise<ChromiumRun<Report>> {
  const { title, timeoutMs = 120_000, args = [], files = {} } = options;
  const server = await serveBrowserBundle(bundlePath, title, files);
  let browser: Browser | undefined;
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    browser = await launchChromium();
    const page = await browser.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(`pageerror: ${error.message}`));
    page.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(`console.error: ${message.text()}`);
    });
    await page.goto(server.url);
    await page.waitForFunction((name) => typeof (globalThis as Record<string, unknown>)[name] === 'function', functionName, { timeout: 10_000 });
    const evaluated = page.evaluate(
      ([name, values]) => (globalThis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[name]!(...values),
      [functionName, args] as const,
    );
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${functionName}() in the page ran past ${timeoutMs} ms.`)), timeoutMs);
    });
    const report = (await Promise.race([evaluated, expired])) as Report;
    return { report, pageErrors };
  } finally {
    clearTimeout(timer);
    await browser?.close();
    await server.close();
  }
}
