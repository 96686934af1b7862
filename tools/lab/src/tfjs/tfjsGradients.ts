import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

let registered: Promise<void> | undefined;

/**
 * Registers tfjs-core's gradients (what `@tensorflow/tfjs` does on import). tfjs-core's Node bundle leaves them out,
 * and its ES module files (`dist/register_all_gradients.js`) import without file extensions, which Node cannot
 * load; so they are bundled once with esbuild next to this module (in the lab's dist/) and imported. Their registry
 * is tfjs's global one, shared with the Node bundle's engine.
 */
export function registerTfjsGradients(): Promise<void> {
  registered ??= (async () => {
    const require = createRequire(import.meta.url);
    const entry = require.resolve('@tensorflow/tfjs-core/dist/register_all_gradients.js');
    const outfile = fileURLToPath(new URL('./tfjs-gradients.bundle.mjs', import.meta.url));
    await build({ entryPoints: [entry], outfile, bundle: true, format: 'esm', platform: 'node', logLevel: 'error' });
    await import(pathToFileURL(outfile).href);
  })();
  return registered;
}
