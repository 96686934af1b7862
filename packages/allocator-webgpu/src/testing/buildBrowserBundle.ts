import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/** The package root: test/browser/ and its compiled form dist-test/browser/ both sit two levels below it. */
const PACKAGE_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The bundle's file name, also the path the test server serves it under. */
export const BROWSER_CHECKS_FILE = 'stowage-webgpu-checks.js';

/**
 * Imports esbuild leaves in the bundle. The `webgpu` package (Dawn) and `node:*` builtins are external: only
 * Node reaches them, through `import()` in `openWebGpuDevice`. A static one would stop the bundle loading in a
 * browser.
 */
export interface ExternalImport {
  readonly path: string;
  /** esbuild's import kind: 'dynamic-import' is safe in a browser; 'import-statement' is not. */
  readonly kind: string;
}

export interface BrowserChecksBundle {
  /** Absolute path of the bundle, dist-browser/stowage-webgpu-checks.js. */
  readonly outfile: string;
  readonly bytes: number;
  readonly externalImports: readonly ExternalImport[];
  readonly warnings: readonly string[];
}

// Note [Linting the bundle]
// `eslint .` has no ignore entry for dist-browser/ (eslint.config.js ignores dist/, dist-test/, dist-bench/), so
// it would lint this generated file and fail on the bundled libraries' code. The banner turns its rules off; ESLint
// still parses the file (a few seconds) and warns about the libraries' own now-unused disable comments. Adding
// '**/dist-browser/**' to the config's ignores removes both, and then the banner can go.

/**
 * Bundles browser/entry.ts with @stowage/core, @stowage/core/testing (chai, fast-check) and this package's dist/
 * into one ES module for the browser. Run `tsc -b` first: the packages resolve to their tsc output.
 * @throws esbuild's error, naming the file and import, when something cannot be bundled for the browser
 */
export async function buildBrowserChecks(): Promise<BrowserChecksBundle> {
  const outfile = join(PACKAGE_ROOT, 'dist-browser', BROWSER_CHECKS_FILE);
  const result = await build({
    entryPoints: [join(PACKAGE_ROOT, 'browser', 'entry.ts')],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    external: ['webgpu', 'node:*'],
    // Generated code: `eslint .` at the root must not lint it (Note [Linting the bundle]).
    banner: { js: '/* eslint-disable */' },
    metafile: true,
    logLevel: 'silent',
  });
  const output = result.metafile.outputs[Object.keys(result.metafile.outputs)[0] ?? ''];
  const externalImports = (output?.imports ?? []).filter((i) => i.external).map(({ path, kind }) => ({ path, kind }));
  return {
    outfile,
    bytes: (await stat(outfile)).size,
    externalImports,
    warnings: result.warnings.map((w) => `${w.location?.file ?? ''}:${w.location?.line ?? ''} ${w.text}`),
  };
}
