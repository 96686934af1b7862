import fc from 'fast-check';
import { StowageError } from '../errors/StowageError.js';

/**
 * Junk for public entry points (Note [The public API under junk] in core's test/publicApi.property.test.ts):
 * wrong types, null, undefined, huge, negative and fractional numbers, NaN, strings, arrays, objects with unknown
 * keys, functions, symbols and bigints. Every package feeds its entry points with it and expects a StowageError
 * with a code, or success (`expectTypedOrSuccess`).
 */
/** Junk of every kind, with `plausible` values mixed in so that calls get past their first check. */
export function junk(plausible: readonly unknown[] = []): fc.Arbitrary<unknown> {
  const base = fc.oneof(
    fc.constantFrom(null, undefined, true, false, Number.NaN, Infinity, -Infinity, -0, -1, 0.5, 2 ** 53, 2 ** 60, Number.MAX_VALUE, 1e21),
    fc.integer({ min: -1000, max: 1 << 20 }),
    fc.double(),
    fc.string({ maxLength: 12 }),
    fc.constantFrom('cpu', 'cuda:1', 'webgpu', 'float32', 'int8', '1KiB', '-1B', 'no', 'yes', '', '__proto__', 'toString'),
    fc.constantFrom(() => undefined, () => null, function named() {
      return 1;
    }),
    fc.constantFrom([], [2, 3], [-1], [0.5], [null], ['2'], [1, -1], [2 ** 40, 2 ** 40]),
    fc.constantFrom({}, { foo: 1 }, { device: 'cpu' }, { dtyp: 'int8' }, { shared: 'no' }, { resizable: 1 }, { ownsUpstream: 'yes' }, Object.create(null) as object),
    fc.constantFrom(new Uint8Array(4), new ArrayBuffer(8), new Map(), new Date(0), Symbol('s'), 10n),
  );
  return plausible.length === 0 ? base : fc.oneof(base, fc.constantFrom(...plausible));
}

/** Up to `n` junk arguments. */
export const junkArgs = (n: number, plausible: readonly unknown[] = []): fc.Arbitrary<unknown[]> => fc.array(junk(plausible), { minLength: 0, maxLength: n });

/** Runs `call`; returns what it returned, or undefined when it threw a StowageError with a code. */
export async function expectTypedOrSuccess(name: string, call: () => unknown): Promise<unknown> {
  try {
    return await call();
  } catch (error) {
    if (error instanceof StowageError && typeof error.code === 'string') return undefined;
    throw new Error(`${name} threw ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`, { cause: error });
  }
}

