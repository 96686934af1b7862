/**
 * A restricted unpickler: it builds plain data and executes nothing.
 *
 * - Reads protocols 2-5 (and the binary opcodes of 1): None, bools, BININT*, LONG1/LONG4, BINFLOAT,
 *   SHORT_BINUNICODE/BINUNICODE/BINUNICODE8, SHORT_BINBYTES/BINBYTES/BINBYTES8, lists, dicts with str keys,
 *   tuples, MARK/POP/POP_MARK/DUP, the memo (BINPUT, LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET), FRAME.
 * - Opcodes that import or call Python objects (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX,
 *   EXT*, PERSID, BINPERSID) stop reading with UnsafePickleError; see Note [Why refuse rather than stub].
 * - Every length is checked against the bytes left before anything is allocated, so a forged length cannot make
 *   it allocate more than the input's size; every opcode consumes at least one byte, so it always ends.
 * - The machine is iterative (an explicit stack), so deep nesting cannot overflow the JavaScript stack.
 * - Bytes after STOP are ignored, as Python's `pickle.loads` ignores them.
 */
import { InvalidArgumentError } from '@stowage/core';
import { Op, opcodeName, UNSAFE_OPCODES } from './internal/opcodes.js';
import { MalformedPickleError, UnsafePickleError } from './PickleError.js';
import type { PickleDict, PickleValue } from './PickleValue.js';
import { PickleFloat, PickleTuple, setPickleItem } from './PickleValue.js';

// Note [Why refuse rather than stub]
// A pickle that names a global is a program: loading it in Python imports and calls whatever it names. Some
// JavaScript unpicklers stand such objects in with placeholders; Stowage refuses instead, because a snapshot
// that torch.cuda.memory._dump_snapshot wrote never holds one, so a pickle that does is either not a snapshot
// or forged, and the user should learn which file it was rather than see a half-read snapshot.

/** Longest module or name of a GLOBAL quoted in an error. */
const QUOTE_CHARS = 200;
/** Opcodes of protocol 0's text format, named in the error for them. */
const TEXT_OPCODES: ReadonlySet<number> = new Set([Op.INT, Op.LONG, Op.FLOAT, Op.STRING, Op.UNICODE, Op.PUT, Op.GET]);

/**
 * Reads one pickle from `bytes` as a {@link PickleValue}.
 * @throws InvalidArgumentError when `bytes` is not a Uint8Array
 * @throws UnsafePickleError at the first opcode that would import or call Python code
 * @throws MalformedPickleError for truncated or corrupt input, an opcode outside the subset above (sets,
 * protocol 0's text opcodes, out-of-band buffers), a dict key that is not a str, or a protocol above 5
 */
export function readPickle(bytes: Uint8Array): PickleValue {
  if (!(bytes instanceof Uint8Array)) throw new InvalidArgumentError('bytes', bytes, 'a Uint8Array (the pickle file read as bytes)');
  return new PickleReader(bytes).run();
}

/**
 * Invariants: `marks` is non-decreasing and every mark <= stack.length; `pos` only grows; the memo maps indices
 * to values already built.
 */
class PickleReader {
  readonly #data: Uint8Array;
  readonly #view: DataView;
  readonly #decoder = new TextDecoder('utf-8', { fatal: true });
  #pos = 0;
  /** Offset of the opcode being read, for errors. */
  #at = 0;
  readonly #stack: PickleValue[] = [];
  readonly #marks: number[] = [];
  readonly #memo = new Map<number, PickleValue>();

  constructor(data: Uint8Array) {
    this.#data = data;
    this.#view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  }

  run(): PickleValue {
    for (;;) {
      this.#at = this.#pos;
      if (this.#pos >= this.#data.length) {
        throw this.#malformed(this.#pos === 0 ? 'the input is empty' : 'the data ended before STOP (is the file truncated?)');
      }
      const op = this.#data[this.#pos++]!;
      if (op === Op.STOP) return this.#stop();
      this.#step(op);
    }
  }

  #stop(): PickleValue {
    if (this.#marks.length > 0) throw this.#malformed('STOP with a MARK still open');
    if (this.#stack.length !== 1) throw this.#malformed(`STOP with ${this.#stack.length} values on the stack instead of 1`);
    return this.#stack[0]!;
  }

  #step(op: number): void {
    switch (op) {
      case Op.PROTO: {
        const version = this.#u8();
        if (version > 5) throw this.#malformed(`protocol ${version} is newer than the protocols 2-5 Stowage reads`);
        return;
      }
      case Op.FRAME: {
        const length = this.#u64();
        if (length > this.#remaining()) throw this.#malformed(`FRAME says ${length} bytes but ${this.#remaining()} remain`);
        return;
      }
      case Op.MARK:
        this.#marks.push(this.#stack.length);
        return;
      case Op.POP:
        if (this.#stack.length === this.#base() && this.#marks.length > 0) this.#marks.pop();
        else this.#pop();
        return;
      case Op.POP_MARK:
        this.#popMark();
        return;
      case Op.DUP:
        this.#push(this.#top());
        return;
      case Op.NONE:
        return this.#push(null);
      case Op.NEWTRUE:
        return this.#push(true);
      case Op.NEWFALSE:
        return this.#push(false);
      case Op.BININT1:
        return this.#push(this.#u8());
      case Op.BININT2:
        this.#need(2, 'BININT2');
        this.#pos += 2;
        return this.#push(this.#view.getUint16(this.#pos - 2, true));
      case Op.BININT:
        this.#need(4, 'BININT');
        this.#pos += 4;
        return this.#push(this.#view.getInt32(this.#pos - 4, true));
      case Op.LONG1:
        return this.#push(this.#long(this.#u8(), 'LONG1'));
      case Op.LONG4: {
        this.#need(4, 'LONG4');
        const n = this.#view.getInt32(this.#pos, true);
        this.#pos += 4;
        if (n < 0) throw this.#malformed(`LONG4 has a negative byte count (${n})`);
        return this.#push(this.#long(n, 'LONG4'));
      }
      case Op.BINFLOAT: {
        this.#need(8, 'BINFLOAT');
        const value = this.#view.getFloat64(this.#pos, false);
        this.#pos += 8;
        return this.#push(Number.isInteger(value) ? new PickleFloat(value) : value);
      }
      case Op.SHORT_BINUNICODE:
        return this.#push(this.#text(this.#u8(), 'SHORT_BINUNICODE'));
      case Op.BINUNICODE:
        return this.#push(this.#text(this.#u32(), 'BINUNICODE'));
      case Op.BINUNICODE8:
        return this.#push(this.#text(this.#u64(), 'BINUNICODE8'));
      case Op.SHORT_BINBYTES:
        return this.#push(this.#take(this.#u8(), 'SHORT_BINBYTES').slice());
      case Op.BINBYTES:
        return this.#push(this.#take(this.#u32(), 'BINBYTES').slice());
      case Op.BINBYTES8:
        return this.#push(this.#take(this.#u64(), 'BINBYTES8').slice());
      case Op.EMPTY_LIST:
        return this.#push([]);
      case Op.EMPTY_DICT:
        return this.#push({});
      case Op.EMPTY_TUPLE:
        return this.#push(new PickleTuple([]));
      case Op.LIST:
        return this.#push(this.#popMark());
      case Op.TUPLE:
        return this.#push(new PickleTuple(this.#popMark()));
      case Op.TUPLE1:
      case Op.TUPLE2:
      case Op.TUPLE3: {
        const n = op - Op.TUPLE1 + 1;
        if (this.#stack.length - this.#base() < n) throw this.#malformed(`${opcodeName(op)} needs ${n} values on the stack`);
        return this.#push(new PickleTuple(this.#stack.splice(this.#stack.length - n, n)));
      }
      case Op.DICT: {
        const dict: PickleDict = {};
        this.#setItems(dict, this.#popMark(), 'DICT');
        return this.#push(dict);
      }
      case Op.APPEND: {
        const value = this.#pop();
        this.#list('APPEND').push(value);
        return;
      }
      case Op.APPENDS: {
        const items = this.#popMark();
        const list = this.#list('APPENDS');
        for (const item of items) list.push(item);
        return;
      }
      case Op.SETITEM: {
        const value = this.#pop();
        const key = this.#pop();
        this.#setItems(this.#dict('SETITEM'), [key, value], 'SETITEM');
        return;
      }
      case Op.SETITEMS: {
        const items = this.#popMark();
        this.#setItems(this.#dict('SETITEMS'), items, 'SETITEMS');
        return;
      }
      case Op.BINPUT:
        this.#memo.set(this.#u8(), this.#top());
        return;
      case Op.LONG_BINPUT:
        this.#memo.set(this.#u32(), this.#top());
        return;
      case Op.MEMOIZE:
        this.#memo.set(this.#memo.size, this.#top());
        return;
      case Op.BINGET:
        return this.#push(this.#memoGet(this.#u8()));
      case Op.LONG_BINGET:
        return this.#push(this.#memoGet(this.#u32()));
      default:
        throw this.#refuse(op);
    }
  }

  #refuse(op: number): Error {
    if (op === Op.GLOBAL) return new UnsafePickleError(this.#at, 'GLOBAL', this.#globalName());
    if (op === Op.STACK_GLOBAL) {
      const name = this.#stack.at(-1);
      const module = this.#stack.at(-2);
      const global = typeof module === 'string' && typeof name === 'string' ? `${quote(module)}.${quote(name)}` : undefined;
      return new UnsafePickleError(this.#at, 'STACK_GLOBAL', global);
    }
    if (UNSAFE_OPCODES.has(op)) return new UnsafePickleError(this.#at, opcodeName(op));
    if (TEXT_OPCODES.has(op)) return this.#malformed(`opcode ${opcodeName(op)} belongs to protocol 0's text format, which Stowage does not read (re-save with protocol 2 or later)`);
    const name = opcodeName(op);
    return this.#malformed(name.startsWith('0x') ? `byte ${name} is not a pickle opcode` : `opcode ${name} is outside the subset Stowage reads`);
  }

  /** `module.name` of the GLOBAL at #pos (two newline-ended lines), when both lines are there. */
  #globalName(): string | undefined {
    const module = this.#line();
    const name = module === undefined ? undefined : this.#line();
    return module === undefined || name === undefined ? undefined : `${quote(module)}.${quote(name)}`;
  }

  #line(): string | undefined {
    const end = this.#data.indexOf(0x0a, this.#pos);
    if (end < 0) return undefined;
    const text = new TextDecoder('latin1').decode(this.#data.subarray(this.#pos, end));
    this.#pos = end + 1;
    return text;
  }

  #setItems(dict: PickleDict, items: PickleValue[], op: string): void {
    if (items.length % 2 !== 0) throw this.#malformed(`${op} has an odd number of values (${items.length}) for key-value pairs`);
    for (let i = 0; i < items.length; i += 2) {
      const key = items[i]!;
      if (typeof key !== 'string') throw this.#malformed(`${op} has a dict key of type ${pythonType(key)}; Stowage reads dicts with str keys only`);
      setPickleItem(dict, key, items[i + 1]!);
    }
  }

  #list(op: string): PickleValue[] {
    const target = this.#top();
    if (!Array.isArray(target)) throw this.#malformed(`${op} onto a ${pythonType(target)}, not a list`);
    return target;
  }

  #dict(op: string): PickleDict {
    const target = this.#top();
    if (pythonType(target) !== 'dict') throw this.#malformed(`${op} onto a ${pythonType(target)}, not a dict`);
    return target as PickleDict;
  }

  #memoGet(index: number): PickleValue {
    const value = this.#memo.get(index);
    if (value === undefined) throw this.#malformed(`memo slot ${index} was read before it was stored`);
    return value;
  }

  /** Stack height at the innermost open MARK (0 without one): values below it are not this level's. */
  #base(): number {
    return this.#marks.at(-1) ?? 0;
  }

  #push(value: PickleValue): void {
    this.#stack.push(value);
  }

  #pop(): PickleValue {
    if (this.#stack.length <= this.#base()) throw this.#malformed(`${opcodeName(this.#data[this.#at]!)} needs a value but the stack is empty`);
    return this.#stack.pop()!;
  }

  #top(): PickleValue {
    if (this.#stack.length <= this.#base()) throw this.#malformed(`${opcodeName(this.#data[this.#at]!)} needs a value but the stack is empty`);
    return this.#stack[this.#stack.length - 1]!;
  }

  #popMark(): PickleValue[] {
    const mark = this.#marks.pop();
    if (mark === undefined) throw this.#malformed(`${opcodeName(this.#data[this.#at]!)} without a MARK before it`);
    return this.#stack.splice(mark);
  }

  /** A two's-complement little-endian int of `n` bytes: a number when safe, else a bigint. */
  #long(n: number, op: string): number | bigint {
    const bytes = this.#take(n, op);
    if (n === 0) return 0;
    let hex = '';
    for (let i = n - 1; i >= 0; i--) hex += bytes[i]!.toString(16).padStart(2, '0');
    let value = BigInt(`0x${hex}`);
    if (bytes[n - 1]! & 0x80) value -= 1n << BigInt(8 * n);
    const asNumber = Number(value);
    return Number.isSafeInteger(asNumber) ? asNumber : value;
  }

  #text(n: number, op: string): string {
    const bytes = this.#take(n, op);
    try {
      return this.#decoder.decode(bytes);
    } catch (error) {
      throw this.#malformed(`${op} holds ${n} bytes that are not UTF-8`, { cause: error });
    }
  }

  #take(n: number, op: string): Uint8Array {
    this.#need(n, op);
    this.#pos += n;
    return this.#data.subarray(this.#pos - n, this.#pos);
  }

  #u8(): number {
    this.#need(1);
    return this.#data[this.#pos++]!;
  }

  #u32(): number {
    this.#need(4);
    this.#pos += 4;
    return this.#view.getUint32(this.#pos - 4, true);
  }

  /** An 8-byte length; beyond 2^53 it is imprecise, which is fine: such a length always exceeds the input. */
  #u64(): number {
    this.#need(8);
    this.#pos += 8;
    return Number(this.#view.getBigUint64(this.#pos - 8, true));
  }

  #remaining(): number {
    return this.#data.length - this.#pos;
  }

  /** @param what the opcode's name; default the name of the opcode at #at */
  #need(n: number, what?: string): void {
    if (n > this.#remaining()) {
      throw this.#malformed(`${what ?? opcodeName(this.#data[this.#at]!)} needs ${n} bytes but ${this.#remaining()} remain (is the file truncated?)`);
    }
  }

  #malformed(problem: string, options?: ErrorOptions): MalformedPickleError {
    return new MalformedPickleError(this.#at, problem, options);
  }
}

/** Python's name for the type of a value read. */
function pythonType(value: PickleValue): string {
  if (value === null) return 'NoneType';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'number') return Number.isInteger(value) ? 'int' : 'float';
  if (typeof value === 'bigint') return 'int';
  if (typeof value === 'string') return 'str';
  if (value instanceof Uint8Array) return 'bytes';
  if (value instanceof PickleFloat) return 'float';
  if (value instanceof PickleTuple) return 'tuple';
  if (Array.isArray(value)) return 'list';
  return 'dict';
}

function quote(text: string): string {
  return text.length <= QUOTE_CHARS ? text : `${text.slice(0, QUOTE_CHARS)}…`;
}
