/**
 * The Python values Stowage reads and writes as pickles, as JavaScript values:
 *
 * | Python | JavaScript |
 * | --- | --- |
 * | `None`, `True`/`False`, `str` | `null`, `boolean`, `string` |
 * | `int` | `number` when it is a safe integer, else `bigint` (the writer takes both) |
 * | `float` | `number` when it is not an integer; a {@link PickleFloat} when it is (`0.0`, `-0.0`, `2.0`) |
 * | `tuple` | {@link PickleTuple} |
 * | `list` | `Array` |
 * | `dict` with `str` keys | a {@link PickleDict}: a plain object whose own enumerable properties are the items |
 * | `bytes` | `Uint8Array` |
 *
 * See Note [Numbers in pickles]. A `number` that is not a safe integer (`1.5`, `1e300`, `NaN`) is written as a
 * float; write an integral float as `new PickleFloat(2)`.
 */
export type PickleValue = null | boolean | number | bigint | string | Uint8Array | PickleFloat | PickleTuple | PickleValue[] | PickleDict;

/** A Python `dict` with `str` keys. Key order is JavaScript's property order (integer-like keys first). */
export interface PickleDict {
  [key: string]: PickleValue;
}

// Note [Numbers in pickles]
// Python tells int from float; JavaScript has one number type. A safe integer is an int both ways; a Python
// float with an integral value comes back as PickleFloat, so that reading and writing again gives back the
// same pickle types (PyTorch's `garbage_collection_threshold: 0.0` stays a float). Python ints beyond 2^53
// come back as bigint: PyTorch's addresses and times fit in a safe integer, so snapshots hold plain numbers.

/** A Python `float` whose value is an integer, or any float the caller wants written as one. */
export class PickleFloat {
  constructor(readonly value: number) {}

  valueOf(): number {
    return this.value;
  }
}

/** A Python `tuple`: an immutable sequence, distinct from a `list`. */
export class PickleTuple {
  readonly items: readonly PickleValue[];

  constructor(items: readonly PickleValue[]) {
    this.items = Object.freeze([...items]);
  }
}

/** True when `value` is a {@link PickleDict}: a plain object (not an array, tuple, float or byte array). */
export function isPickleDict(value: unknown): value is PickleDict {
  if (typeof value !== 'object' || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Sets `dict[key] = value` as an own property, even for keys such as `__proto__`. */
export function setPickleItem(dict: PickleDict, key: string, value: PickleValue): void {
  Object.defineProperty(dict, key, { value, enumerable: true, writable: true, configurable: true });
}

/** The number a Python int or float holds: `PickleFloat` unwrapped, `bigint` converted (losing precision). */
export function pickleNumber(value: PickleValue): number | undefined {
  if (typeof value === 'number') return value;
  if (typeof value === 'bigint') return Number(value);
  if (value instanceof PickleFloat) return value.value;
  return undefined;
}
