import { fileURLToPath } from 'node:url';
import type { BrowserBundle } from '@stowage/lab/browser';
import { buildBrowserBundle } from '@stowage/lab/browser';

/** The example's root: src/ and its compiled form dist/ both sit one level below it. */
export const EXAMPLE_ROOT = fileURLToPath(new URL('../', import.meta.url));

/** Where the page's bundle is written (git-ignored, as every dist-browser/ is). */
export const BUNDLE_PATH = fileURLToPath(new URL('../dist-browser/browser-lms.js', import.meta.url));

/** The page's HTML, served as it is. */
export const PAGE_PATH = fileURLToPath(new URL('../page/index.html', import.meta.url));

/**
 * Bundles the page's script (page/main.ts: tfjs, its WebGPU backend, tfjs-converter, Stowage, LMS and the memory
 * page of @stowage/cli) into one ES module for the browser, with esbuild through the lab's browser harness. Run
 * `tsc -b` first: the packages resolve to their tsc output.
 * @throws esbuild's error when something cannot be bundled for the browser
 */
export function buildPage(): Promise<BrowserBundle> {
  return buildBrowserBundle({
    entryPoint: fileURLToPath(new URL('../page/main.ts', import.meta.url)),
    outfile: BUNDLE_PATH,
    // @stowage/cli's index names its command line's packages; the page uses only its memory page and recorder.
    external: ['cli-progress', 'commander'],
  });
}
