import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

let gc: (() => void) | undefined;

/**
 * Runs a full garbage collection: `globalThis.gc` under `node --expose-gc`, else V8's collector exposed through
 * its flags. Benches call it between measurements, so that no measurement pays for the garbage of another.
 */
export function collectGarbage(): void {
  gc ??= (globalThis as { gc?: () => void }).gc ?? exposeCollector();
  gc();
}

function exposeCollector(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}
