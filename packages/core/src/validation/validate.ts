import type { AllocateOptions } from '../contracts/Allocator.js';
import { InvalidArgumentError } from '../errors/InvalidArgumentError.js';

/** Throws unless `value` is an integer in [0, Number.MAX_SAFE_INTEGER]. */
export function checkByteCount(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(argument, value, 'a whole number of bytes in [0, Number.MAX_SAFE_INTEGER]');
  }
  return value;
}

/** Throws unless `value` is an integer in [0, Number.MAX_SAFE_INTEGER]; for counts that are not bytes. */
export function checkCount(argument: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new InvalidArgumentError(argument, value, 'a non-negative safe integer');
  }
  return value;
}

/** Returns `value` when it is a non-empty string (a path, a text). @throws InvalidArgumentError saying what it is for */
export function checkString(argument: string, value: unknown, what = 'a non-empty string'): string {
  if (typeof value === 'string' && value !== '') return value;
  throw new InvalidArgumentError(argument, value, what);
}

/** Throws unless `[offset, offset + length)` lies inside `[0, limit)`. */
export function checkRange(argument: string, offset: number, length: number, limit: number, what: string): void {
  if (offset + length > limit) {
    throw new InvalidArgumentError(
      argument,
      offset + length,
      `at most the ${what}'s ${limit} bytes (offset ${offset} + length ${length} runs past the end)`,
    );
  }
}

/** Returns the bytes of an ArrayBufferView without copying; throws for anything else. */
export function checkBytes(argument: string, value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  if (ArrayBuffer.isView(value)) return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  throw new InvalidArgumentError(argument, value, 'a Uint8Array or another ArrayBufferView');
}

/**
 * Checks an options object: `undefined` is `{}`; anything but a plain object (or class instance) throws. With
 * `knownKeys`, a key outside them throws too, naming the nearest known key (a misspelled option must not silently
 * do nothing: JavaScript callers have no excess-property check). Keys whose value is `undefined` are ignored.
 * @throws InvalidArgumentError naming `argument` (and the unknown key as `argument.key`)
 */
export function checkOptions<T extends object>(argument: string, value: T | undefined, knownKeys?: readonly string[]): T {
  if (value === undefined) return {} as T;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidArgumentError(argument, value, 'an options object (or nothing)');
  if (knownKeys) {
    for (const key of Object.keys(value)) {
      if (knownKeys.includes(key) || (value as Record<string, unknown>)[key] === undefined) continue;
      const near = nearestName(key, knownKeys);
      const hint = near === undefined ? '' : ` (did you mean ${near}?)`;
      throw new InvalidArgumentError(`${argument}.${key}`, (value as Record<string, unknown>)[key], `left out: it is not an option here${hint}; known options are ${knownKeys.join(', ')}`);
    }
  }
  return value;
}

/** Returns `value` when it is a boolean, `undefined` when absent. @throws InvalidArgumentError for anything else ('no', 1, …) */
export function checkBoolean(argument: string, value: unknown): boolean | undefined {
  if (value === undefined || typeof value === 'boolean') return value;
  throw new InvalidArgumentError(argument, value, 'true or false');
}

/** Returns `value` when it is one of `allowed`, `undefined` when absent. @throws InvalidArgumentError listing `allowed` */
export function checkEnum<T extends string>(argument: string, value: unknown, allowed: readonly T[]): T | undefined {
  if (value === undefined || allowed.includes(value as T)) return value as T | undefined;
  throw new InvalidArgumentError(argument, value, `one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}`);
}

/** Returns `value` when it is a function. @throws InvalidArgumentError saying what the function is for */
export function checkFunction<F extends (...args: never[]) => unknown>(argument: string, value: unknown, what = 'a function'): F {
  if (typeof value === 'function') return value as F;
  throw new InvalidArgumentError(argument, value, what);
}

/**
 * Checks what user code handed back at a boundary (a plugin's factory, a policy, a wrapper): returns `value` when
 * `isValid` accepts it. @throws InvalidArgumentError naming the source (`'the reshape policy "mine"'`) and what it
 * should have returned
 */
export function checkReturned<T>(source: string, value: unknown, isValid: (value: unknown) => value is T, expectation: string): T {
  if (isValid(value)) return value;
  throw new InvalidArgumentError(`the value ${source} returned`, value, expectation);
}

/**
 * The known name nearest to `name`, for a "did you mean" hint: a case-insensitive prefix either way, or at most
 * `maxDistance` edits away (default 2); undefined when none is that near.
 */
export function nearestName<K extends string>(name: string, knownNames: readonly K[], maxDistance = 2): K | undefined {
  const lower = name.toLowerCase();
  let best: K | undefined;
  let bestDistance = maxDistance + 1;
  for (const known of knownNames) {
    const knownLower = known.toLowerCase();
    const d = knownLower.startsWith(lower) || lower.startsWith(knownLower) ? 1 : editDistance(name, known);
    if (d < bestDistance) {
      best = known;
      bestDistance = d;
    }
  }
  return best;
}

/** Levenshtein distance (short strings only: option names). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}

/**
 * Throws unless `options` is an options object whose keys are the Allocator contract's AllocateOptions (a `for…in`
 * over one or two keys: no allocation on the path of a call that passes options).
 */
export function checkAllocateOptions(options: AllocateOptions): void {
  checkOptions('options', options);
  for (const key in options) {
    if (key !== 'stream' && key !== 'usage' && key !== 'shared' && (options as Record<string, unknown>)[key] !== undefined) {
      checkOptions('options', options, ALLOCATE_OPTION_KEYS); // throws, naming the key and the nearest known one
    }
  }
}

const ALLOCATE_OPTION_KEYS: readonly string[] = ['stream', 'usage', 'shared'];
