/**
 * A pickle writer for plain data, the inverse of `readPickle`:
 *
 * - Writes protocol 2, 3 or 4 (default 4, what PyTorch's `_dump_snapshot` writes and its memory viewer reads).
 * - Ints as BININT1/BININT2/BININT when they fit, else LONG1 (LONG4 past 255 bytes); floats as BINFLOAT.
 * - Strings as SHORT_BINUNICODE (protocol 4, under 256 bytes of UTF-8), else BINUNICODE (BINUNICODE8 past 4 GiB).
 * - Lists and dicts are memoized when created and filled in batches of 1000 (APPENDS, SETITEMS), as CPython does,
 *   so shared and cyclic lists and dicts come back shared; equal strings and tuples are written once and
 *   then referenced (BINGET/LONG_BINGET), which keeps snapshots, whose frames repeat, small.
 * - Memo: MEMOIZE in protocol 4, BINPUT/LONG_BINPUT below it. No FRAME opcodes (framing is optional).
 * - Only the opcodes PyTorch's memory viewer (MemoryViz.js) understands are used for the types a snapshot has.
 */
import { InvalidArgumentError } from '@stowage/core';
import { Op } from './internal/opcodes.js';
import type { PickleDict, PickleValue } from './PickleValue.js';
import { isPickleDict, PickleFloat, PickleTuple } from './PickleValue.js';

export interface WritePickleOptions {
  /** Pickle protocol, 2 to 4. Default 4. Bytes need 3 or more. */
  readonly protocol?: 2 | 3 | 4;
}

/** Items per APPENDS or SETITEMS, as CPython's pickler batches them. */
const BATCH = 1000;
/** Deepest nesting of lists, dicts and tuples written (CPython's default recursion limit). */
const MAX_DEPTH = 1000;
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Writes `value` as a pickle that Python's `pickle.load` reads back as the same value (see `PickleValue` for the
 * mapping of types).
 * @returns the pickle's bytes, from PROTO to STOP
 * @throws InvalidArgumentError for a value that is no PickleValue (naming where: `value.segments[2].frames`), a
 * string with a lone surrogate, bytes under protocol 2, a tuple that contains itself, nesting deeper than 1000,
 * or a protocol other than 2, 3 or 4
 */
export function writePickle(value: PickleValue, options: WritePickleOptions = {}): Uint8Array {
  const protocol = options.protocol ?? 4;
  if (protocol !== 2 && protocol !== 3 && protocol !== 4) throw new InvalidArgumentError('options.protocol', protocol, '2, 3 or 4');
  const writer = new PickleWriter(protocol);
  writer.save(value);
  return writer.finish();
}

/** Invariants: memo indices are 0 … memoCount-1 in the order written; `#length <= #bytes.length`. */
class PickleWriter {
  #bytes = new Uint8Array(1 << 16);
  #length = 0;
  #memoCount = 0;
  /** Memo index of each list, dict and tuple written, by identity. */
  readonly #objects = new Map<object, number>();
  /** Memo index of each string written, by value. */
  readonly #strings = new Map<string, number>();
  /** Tuples being written: a tuple met again inside itself cannot be written. */
  readonly #open = new Set<PickleTuple>();
  readonly #encoder = new TextEncoder();
  readonly #scratch = new DataView(new ArrayBuffer(8));
  /** Where the value being written sits: keys and indices from the root, joined into a path only for errors. */
  readonly #path: (string | number)[] = [];

  constructor(readonly protocol: 2 | 3 | 4) {
    this.#byte(Op.PROTO);
    this.#byte(protocol);
  }

  finish(): Uint8Array {
    this.#byte(Op.STOP);
    return this.#bytes.slice(0, this.#length);
  }

  save(value: PickleValue): void {
    if (value === null) this.#byte(Op.NONE);
    else if (value === true) this.#byte(Op.NEWTRUE);
    else if (value === false) this.#byte(Op.NEWFALSE);
    else if (typeof value === 'number') {
      if (Number.isSafeInteger(value) && !Object.is(value, -0)) this.#int(value);
      else this.#float(value);
    } else if (typeof value === 'bigint') this.#int(value);
    else if (typeof value === 'string') this.#string(value);
    else if (value instanceof PickleFloat) {
      if (typeof value.value !== 'number') throw new InvalidArgumentError(`${this.#where()}.value`, value.value, 'a number');
      this.#float(value.value);
    } else if (value instanceof Uint8Array) this.#bytesValue(value);
    else if (typeof value !== 'object') throw new InvalidArgumentError(this.#where(), value, 'a PickleValue (null, boolean, number, bigint, string, Uint8Array, PickleFloat, PickleTuple, array or plain object)');
    else if (this.#get(this.#objects.get(value))) return;
    else {
      if (this.#path.length >= MAX_DEPTH) throw new InvalidArgumentError(this.#where(), value, `nested at most ${MAX_DEPTH} deep`);
      if (value instanceof PickleTuple) this.#tuple(value);
      else if (Array.isArray(value)) this.#list(value);
      else if (isPickleDict(value)) this.#dict(value);
      else throw new InvalidArgumentError(this.#where(), value, 'a PickleValue (null, boolean, number, bigint, string, Uint8Array, PickleFloat, PickleTuple, array or plain object)');
    }
  }

  /** Writes `value`, a member of the value being written, as `[key]` or `.key` of its path. */
  #saveMember(key: string | number, value: PickleValue): void {
    this.#path.push(key);
    this.save(value);
    this.#path.pop();
  }

  /** The path of the value being written, for an error: `value.segments[2].frames`. */
  #where(): string {
    return `value${this.#path.map((k) => (typeof k === 'number' ? `[${k}]` : `.${k}`)).join('')}`;
  }

  #list(list: readonly PickleValue[]): void {
    this.#byte(Op.EMPTY_LIST);
    this.#objects.set(list, this.#put());
    for (let start = 0; start < list.length; start += BATCH) {
      const end = Math.min(list.length, start + BATCH);
      if (end - start > 1) this.#byte(Op.MARK);
      for (let i = start; i < end; i++) this.#saveMember(i, list[i]!);
      this.#byte(end - start > 1 ? Op.APPENDS : Op.APPEND);
    }
  }

  #dict(dict: PickleDict): void {
    this.#byte(Op.EMPTY_DICT);
    this.#objects.set(dict, this.#put());
    const keys = Object.keys(dict);
    for (let start = 0; start < keys.length; start += BATCH) {
      const end = Math.min(keys.length, start + BATCH);
      if (end - start > 1) this.#byte(Op.MARK);
      for (let i = start; i < end; i++) {
        const key = keys[i]!;
        this.#string(key);
        this.#saveMember(key, dict[key]!);
      }
      this.#byte(end - start > 1 ? Op.SETITEMS : Op.SETITEM);
    }
  }

  #tuple(tuple: PickleTuple): void {
    const items = tuple.items;
    if (items.length === 0) {
      this.#byte(Op.EMPTY_TUPLE);
      return;
    }
    if (this.#open.has(tuple)) throw new InvalidArgumentError(this.#where(), tuple, 'a tuple that does not contain itself');
    this.#open.add(tuple);
    if (items.length > 3) this.#byte(Op.MARK);
    for (let i = 0; i < items.length; i++) this.#saveMember(i, items[i]!);
    this.#open.delete(tuple);
    this.#byte(items.length === 1 ? Op.TUPLE1 : items.length === 2 ? Op.TUPLE2 : items.length === 3 ? Op.TUPLE3 : Op.TUPLE);
    this.#objects.set(tuple, this.#put());
  }

  #string(text: string): void {
    if (this.#get(this.#strings.get(text))) return;
    if (LONE_SURROGATE.test(text)) throw new InvalidArgumentError(this.#where(), text, 'a string without lone surrogates (Python str written as UTF-8)');
    const utf8 = this.#encoder.encode(text);
    if (utf8.length < 256 && this.protocol >= 4) {
      this.#byte(Op.SHORT_BINUNICODE);
      this.#byte(utf8.length);
    } else if (utf8.length < 2 ** 32) {
      this.#byte(Op.BINUNICODE);
      this.#uint32(utf8.length);
    } else {
      this.#byte(Op.BINUNICODE8);
      this.#uint64(utf8.length);
    }
    this.#raw(utf8);
    this.#strings.set(text, this.#put());
  }

  #bytesValue(bytes: Uint8Array): void {
    if (this.protocol < 3) throw new InvalidArgumentError(this.#where(), bytes, 'no bytes under protocol 2 (use protocol 3 or 4)');
    if (bytes.length < 256) {
      this.#byte(Op.SHORT_BINBYTES);
      this.#byte(bytes.length);
    } else if (bytes.length < 2 ** 32) {
      this.#byte(Op.BINBYTES);
      this.#uint32(bytes.length);
    } else {
      this.#byte(Op.BINBYTES8);
      this.#uint64(bytes.length);
    }
    this.#raw(bytes);
  }

  /** @param value a safe integer or a bigint */
  #int(value: number | bigint): void {
    const small = typeof value === 'number' ? value : value >= -(2n ** 31n) && value < 2n ** 31n ? Number(value) : undefined;
    if (small !== undefined && small >= 0 && small < 256) {
      this.#byte(Op.BININT1);
      this.#byte(small);
    } else if (small !== undefined && small >= 0 && small < 65536) {
      this.#byte(Op.BININT2);
      this.#byte(small & 0xff);
      this.#byte(small >> 8);
    } else if (small !== undefined && small >= -(2 ** 31) && small < 2 ** 31) {
      this.#byte(Op.BININT);
      this.#uint32(small >>> 0);
    } else {
      const bytes = twosComplement(BigInt(value));
      if (bytes.length < 256) {
        this.#byte(Op.LONG1);
        this.#byte(bytes.length);
      } else {
        this.#byte(Op.LONG4);
        this.#uint32(bytes.length);
      }
      this.#raw(bytes);
    }
  }

  #float(value: number): void {
    this.#byte(Op.BINFLOAT);
    this.#scratch.setFloat64(0, value, false);
    this.#raw(new Uint8Array(this.#scratch.buffer, 0, 8));
  }

  /** Writes a memo reference when `index` is defined; returns whether it did. */
  #get(index: number | undefined): boolean {
    if (index === undefined) return false;
    if (index < 256) {
      this.#byte(Op.BINGET);
      this.#byte(index);
    } else {
      this.#byte(Op.LONG_BINGET);
      this.#uint32(index);
    }
    return true;
  }

  /** Stores the top of the stack in the next memo slot; returns the slot. */
  #put(): number {
    const index = this.#memoCount++;
    if (this.protocol >= 4) this.#byte(Op.MEMOIZE);
    else if (index < 256) {
      this.#byte(Op.BINPUT);
      this.#byte(index);
    } else {
      this.#byte(Op.LONG_BINPUT);
      this.#uint32(index);
    }
    return index;
  }

  #uint32(value: number): void {
    this.#scratch.setUint32(0, value, true);
    this.#raw(new Uint8Array(this.#scratch.buffer, 0, 4));
  }

  #uint64(value: number): void {
    this.#scratch.setBigUint64(0, BigInt(value), true);
    this.#raw(new Uint8Array(this.#scratch.buffer, 0, 8));
  }

  #byte(value: number): void {
    this.#reserve(1);
    this.#bytes[this.#length++] = value;
  }

  #raw(bytes: Uint8Array): void {
    this.#reserve(bytes.length);
    this.#bytes.set(bytes, this.#length);
    this.#length += bytes.length;
  }

  #reserve(extra: number): void {
    if (this.#length + extra <= this.#bytes.length) return;
    const grown = new Uint8Array(Math.max(this.#bytes.length * 2, this.#length + extra));
    grown.set(this.#bytes.subarray(0, this.#length));
    this.#bytes = grown;
  }
}

/** The shortest little-endian two's-complement bytes of `value` (CPython's `encode_long`); empty for 0. */
function twosComplement(value: bigint): Uint8Array {
  const bytes: number[] = [];
  let rest = value;
  for (;;) {
    if (rest === 0n && (bytes.length === 0 || (bytes[bytes.length - 1]! & 0x80) === 0)) break;
    if (rest === -1n && bytes.length > 0 && (bytes[bytes.length - 1]! & 0x80) !== 0) break;
    bytes.push(Number(rest & 0xffn));
    rest >>= 8n;
  }
  return Uint8Array.from(bytes);
}
