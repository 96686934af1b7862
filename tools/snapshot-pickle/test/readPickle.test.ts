import { expect } from 'chai';
import fc from 'fast-check';
import { isStowageError } from '@stowage/core';
import { MalformedPickleError, PickleFloat, PickleTuple, readPickle, UnsafePickleError, writePickle } from '@stowage/snapshot-pickle';

const bytes = (...parts: (number | string)[]): Uint8Array =>
  Uint8Array.from(parts.flatMap((p) => (typeof p === 'number' ? [p] : [...Buffer.from(p, 'latin1')])));

/** The error `readPickle(data)` throws. */
function readError(data: Uint8Array): Error {
  try {
    readPickle(data);
  } catch (error) {
    return error as Error;
  }
  expect.fail('readPickle returned instead of throwing');
}

describe('readPickle', () => {
  it('reads the opcodes PyTorch snapshots use: dicts, lists, tuples, strings, ints of every width, floats, bools and the memo', () => {
    // pickle.dumps({'a': [1, 300, 70000, -5, 2**40, 1.5, 0.0, True, False, None, (1, 2)], 'b': 'é'}, protocol=4) without FRAME
    const data = bytes(
      0x80, 4, 0x7d, 0x94, 0x28,
      0x8c, 1, 'a', 0x94, 0x5d, 0x94, 0x28,
      0x4b, 1, 0x4d, 0x2c, 0x01, 0x4a, 0x70, 0x11, 0x01, 0x00, 0x4a, 0xfb, 0xff, 0xff, 0xff, 0x8a, 6, 0, 0, 0, 0, 0, 1,
      0x47, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x47, 0, 0, 0, 0, 0, 0, 0, 0, 0x88, 0x89, 0x4e, 0x4b, 1, 0x4b, 2, 0x86, 0x94, 0x65,
      0x8c, 1, 'b', 0x94, 0x8c, 2, 0xc3, 0xa9, 0x94, 0x75, 0x2e,
    );
    const value = readPickle(data) as { a: unknown[]; b: string };
    expect(value.b).to.equal('é');
    expect(value.a.slice(0, 6)).to.deep.equal([1, 300, 70000, -5, 2 ** 40, 1.5]);
    expect(value.a[6]).to.be.instanceOf(PickleFloat);
    expect(value.a.slice(7, 10)).to.deep.equal([true, false, null]);
    expect((value.a[10] as PickleTuple).items).to.deep.equal([1, 2]);
  });

  it('returns the same object for every memo reference to it, as Python does', () => {
    const shared = [1];
    const value = readPickle(writePickle([shared, shared])) as unknown[][];
    expect(value[0]).to.equal(value[1]);
  });

  it('refuses a GLOBAL of os.system with UnsafePickleError naming it, before anything runs', () => {
    // pickle of os.system('echo pwned') in protocol 0's style: GLOBAL, MARK, string, TUPLE, REDUCE
    const error = readError(bytes('cos\nsystem\n(X', 10, 0, 0, 0, 'echo pwned', 'tR.'));
    expect(error).to.be.instanceOf(UnsafePickleError);
    expect(isStowageError(error, 'UNSAFE_PICKLE')).to.equal(true);
    expect((error as UnsafePickleError).global).to.equal('os.system');
    expect((error as UnsafePickleError).offset).to.equal(0);
    expect(error.message).to.match(/GLOBAL of os\.system/).and.match(/executes nothing|only plain data/);
  });

  it('refuses STACK_GLOBAL, naming the module and name from the stack', () => {
    const error = readError(bytes(0x80, 4, 0x8c, 8, 'builtins', 0x8c, 4, 'eval', 0x93, 0x2e));
    expect(error).to.be.instanceOf(UnsafePickleError);
    expect((error as UnsafePickleError).global).to.equal('builtins.eval');
    expect((error as UnsafePickleError).offset).to.equal(18);
  });

  it('refuses REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, extension codes and persistent ids', () => {
    for (const op of [0x52, 0x62, 0x69, 0x6f, 0x81, 0x92, 0x82, 0x83, 0x84, 0x50, 0x51]) {
      const error = readError(bytes(0x80, 2, 0x4e, 0x4e, op, 0x2e));
      expect(error, `opcode 0x${op.toString(16)}`).to.be.instanceOf(UnsafePickleError);
      expect((error as UnsafePickleError).code).to.equal('UNSAFE_PICKLE');
    }
  });

  it('reports every truncation of a pickle as MalformedPickleError', () => {
    const whole = writePickle({ segments: [{ address: 2 ** 40, blocks: [new PickleTuple([1, 'x'])], f: 0.25 }], big: 2n ** 300n, s: 'x'.repeat(300) });
    for (let n = 0; n < whole.length; n++) {
      const error = readError(whole.subarray(0, n));
      expect(error, `${n} of ${whole.length} bytes`).to.be.instanceOf(MalformedPickleError);
      expect(isStowageError(error, 'MALFORMED_PICKLE')).to.equal(true);
    }
  });

  it('refuses absurd lengths (BINUNICODE8, BINBYTES, LONG4, FRAME) at once, without allocating them', () => {
    const huge = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
    const cases = [
      bytes(0x80, 4, 0x8d, ...huge, 'abc'),
      bytes(0x80, 4, 0x58, 0xff, 0xff, 0xff, 0xff, 'abc'),
      bytes(0x80, 3, 0x42, 0xff, 0xff, 0xff, 0xff, 'abc'),
      bytes(0x80, 2, 0x8b, 0xff, 0xff, 0xff, 0x7f, 1),
      bytes(0x80, 4, 0x95, ...huge, 0x4e, 0x2e),
    ];
    for (const data of cases) {
      const error = readError(data);
      expect(error).to.be.instanceOf(MalformedPickleError);
      expect(error.message).to.match(/remain/);
    }
    expect(readError(bytes(0x80, 2, 0x8b, 0xff, 0xff, 0xff, 0xff, 0x2e)).message).to.match(/negative byte count/);
  });

  it('reports stack and memo misuse, non-str dict keys and unsupported opcodes as MalformedPickleError', () => {
    const cases: [Uint8Array, RegExp][] = [
      [bytes(0x80, 4, 0x2e), /STOP with 0 values/],
      [bytes(0x80, 4, 0x4e, 0x4e, 0x2e), /STOP with 2 values/],
      [bytes(0x80, 4, 0x61, 0x2e), /stack is empty/],
      [bytes(0x80, 4, 0x7d, 0x4e, 0x61, 0x2e), /APPEND onto a dict/],
      [bytes(0x80, 4, 0x5d, 0x4b, 1, 0x4e, 0x73, 0x2e), /SETITEM onto a list/],
      [bytes(0x80, 4, 0x7d, 0x4b, 1, 0x4e, 0x73, 0x2e), /dict key of type int/],
      [bytes(0x80, 4, 0x68, 7, 0x2e), /memo slot 7/],
      [bytes(0x80, 4, 0x65, 0x2e), /without a MARK/],
      [bytes(0x80, 4, 0x8f, 0x2e), /EMPTY_SET is outside the subset/],
      [bytes('I42\n.'), /protocol 0's text format/],
      [bytes(0x80, 6, 0x4e, 0x2e), /protocol 6/],
      [bytes(0x80, 4, 0xff, 0x2e), /byte 0xff is not a pickle opcode/],
      [bytes(0x80, 4, 0x8c, 2, 0xed, 0xa0, 0x2e), /not UTF-8/],
      [bytes(), /empty/],
    ];
    for (const [data, message] of cases) {
      const error = readError(data);
      expect(error, String(message)).to.be.instanceOf(MalformedPickleError);
      expect(error.message).to.match(message);
    }
  });

  it('either reads arbitrary bytes or throws a typed pickle error, and always ends', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (tail) => {
        const data = Uint8Array.from([0x80, 4, ...tail]);
        try {
          readPickle(data);
        } catch (error) {
          expect(error instanceof MalformedPickleError || error instanceof UnsafePickleError, String(error)).to.equal(true);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it('either reads a pickle with corrupted bytes or throws a typed pickle error', () => {
    const whole = writePickle({ segments: [{ address: 2 ** 40, blocks: [new PickleTuple([1, 'x']), [1.5, null, true]], frames: [] }], big: -(2n ** 300n) });
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.nat(whole.length - 1), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 4 }), (flips) => {
        const data = whole.slice();
        for (const [at, byte] of flips) data[at] = byte;
        try {
          readPickle(data);
        } catch (error) {
          expect(error instanceof MalformedPickleError || error instanceof UnsafePickleError, String(error)).to.equal(true);
        }
      }),
      { numRuns: 5000 },
    );
  });

  it('keeps a key named __proto__ as an ordinary item', () => {
    const value = readPickle(bytes(0x80, 4, 0x7d, 0x8c, 9, '__proto__', 0x5d, 0x73, 0x2e)) as Record<string, unknown>;
    expect(Object.keys(value)).to.deep.equal(['__proto__']);
    expect(Object.getPrototypeOf(value)).to.equal(Object.prototype);
  });
});
