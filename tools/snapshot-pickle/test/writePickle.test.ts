import { expect } from 'chai';
import fc from 'fast-check';
import { InvalidArgumentError } from '@stowage/core';
import type { PickleValue } from '@stowage/snapshot-pickle';
import { PickleFloat, PickleTuple, readPickle, writePickle } from '@stowage/snapshot-pickle';
import { pickleValue } from './arbitraries.js';
import { canonical } from './canonical.js';

/** A pickle's bytes as numbers, for the tests that check the encoding chosen. */
const opcodes = (data: Uint8Array): number[] => [...data];

describe('writePickle', () => {
  it('round-trips every PickleValue through readPickle, type for type, in protocols 3 and 4', () => {
    fc.assert(
      fc.property(pickleValue, fc.constantFrom(3 as const, 4 as const), (value, protocol) => {
        expect(canonical(readPickle(writePickle(value, { protocol })))).to.deep.equal(canonical(value));
      }),
      { numRuns: 500 },
    );
  });

  it('round-trips values without bytes in protocol 2', () => {
    const noBytes = pickleValue.filter((v) => !JSON.stringify(canonical(v)).includes('"bytes"'));
    fc.assert(
      fc.property(noBytes, (value) => {
        expect(canonical(readPickle(writePickle(value, { protocol: 2 })))).to.deep.equal(canonical(value));
      }),
      { numRuns: 200 },
    );
  });

  it('writes each int with the shortest opcode CPython uses: BININT1, BININT2, BININT, then LONG1 and LONG4', () => {
    const body = (v: number | bigint) => opcodes(writePickle(v)).slice(2, -1);
    expect(body(7)).to.deep.equal([0x4b, 7]);
    expect(body(300)).to.deep.equal([0x4d, 0x2c, 0x01]);
    expect(body(-1)).to.deep.equal([0x4a, 0xff, 0xff, 0xff, 0xff]);
    expect(body(2 ** 31)).to.deep.equal([0x8a, 5, 0, 0, 0, 0x80, 0]);
    expect(body(-(2 ** 31) - 1)).to.deep.equal([0x8a, 5, 0xff, 0xff, 0xff, 0x7f, 0xff]);
    expect(body(2n ** 2100n)[0]).to.equal(0x8b);
  });

  it('writes a non-integral number or a PickleFloat as BINFLOAT, big-endian', () => {
    expect(opcodes(writePickle(1.5)).slice(2, -1)).to.deep.equal([0x47, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0]);
    expect(opcodes(writePickle(new PickleFloat(0))).slice(2, -1)).to.deep.equal([0x47, 0, 0, 0, 0, 0, 0, 0, 0]);
  });

  it('writes a repeated string and a shared list once, then memo references', () => {
    const shared = ['abc'];
    const data = writePickle([shared, shared, 'abc']);
    const back = readPickle(data) as unknown[];
    expect(back[0]).to.equal(back[1]);
    expect(Buffer.from(data).toString('latin1').split('abc').length - 1).to.equal(1);
  });

  it('writes a list that contains itself, as Python does', () => {
    const cyclic: PickleValue[] = [1];
    cyclic.push(cyclic);
    const back = readPickle(writePickle(cyclic)) as unknown[];
    expect(back[1]).to.equal(back);
  });

  it('uses MEMOIZE in protocol 4 and BINPUT below it', () => {
    expect(opcodes(writePickle([], { protocol: 4 }))).to.deep.equal([0x80, 4, 0x5d, 0x94, 0x2e]);
    expect(opcodes(writePickle([], { protocol: 2 }))).to.deep.equal([0x80, 2, 0x5d, 0x71, 0, 0x2e]);
  });

  it('throws InvalidArgumentError naming where a value is not plain data', () => {
    const cases: [unknown, RegExp][] = [
      [{ a: [1, undefined] }, /value\.a\[1\]/],
      [{ f: () => 1 }, /value\.f/],
      [new Map(), /value must be a PickleValue/],
      ['\uD800', /lone surrogates/],
      [new PickleTuple([new Uint8Array(1)]), /protocol 3 or 4/],
    ];
    for (const [value, message] of cases) {
      expect(() => writePickle(value as PickleValue, { protocol: 2 })).to.throw(InvalidArgumentError, message);
    }
    expect(() => writePickle(null, { protocol: 5 as 4 })).to.throw(InvalidArgumentError, /options\.protocol/);
    let deep: PickleValue = [];
    for (let i = 0; i < 2000; i++) deep = [deep];
    expect(() => writePickle(deep)).to.throw(InvalidArgumentError, /nested at most 1000 deep/);
  });

  it('refuses a tuple that contains itself', () => {
    const list: PickleValue[] = [];
    const tuple = new PickleTuple([list]);
    list.push(tuple);
    expect(() => writePickle(tuple)).to.throw(InvalidArgumentError, /does not contain itself/);
  });
});
