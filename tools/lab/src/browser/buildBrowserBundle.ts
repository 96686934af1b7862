import { stat } from 'node:fs/promises';
import { build } from 'esbuild';

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

export interface BrowserBundleOptions {
  /** Absolute path of the entry file, such as `<package>/browser/entry.ts`. */
  readonly entryPoint: string;
  /** Absolute path of the bundle to write, under the package's dist-browser/ (Note [Linting the bundle]). */
  readonly outfile: string;
  /**
   * More imports to leave out of the bundle, beside `webgpu` and `node:*`: Node-only packages that a module the
   * entry imports names but whose importers the bundle does not use (esbuild drops those importers, and with them
   * the import, from a package marked `"sideEffects": false`; one still in use shows in `externalImports`).
   */
  readonly external?: readonly string[];
}

export interface BrowserBundle {
  /** Absolute path of the bundle written. */
  readonly outfile: string;
  readonly bytes: number;
  readonly externalImports: readonly ExternalImport[];
  readonly warnings: readonly string[];
}

// Note [Linting the bundle]
// `eslint .` must not lint a bundle: it is generated, and the bundled libraries' code fails the rules.
// eslint.config.js ignores '**/dist-browser/**', where the packages write their bundles. The banner turns the rules
// off as well, so that a bundle written anywhere else fails nothing either.

/**
 * Bundles an entry file and everything it imports into one ES module for the browser, leaving `webgpu` and
 * `node:*` external (see {@link ExternalImport}). The entry imports the packages as a browser application would,
 * through their exports maps, so run `tsc -b` first: they resolve to their tsc output in dist/.
 * @throws esbuild's error, naming the file and import, when something cannot be bundled for the browser
 */
export async function buildBrowserBundle(options: BrowserBundleOptions): Promise<BrowserBundle> {
  const { entryPoint, outfile, external = [] } = options;
  const result = await build({
    entryPoints: [entryPoint],
    outfile,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'es2022',
    external: ['webgpu', 'node:*', ...external],
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
