import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import { TraceBuilder } from '@stowage/example-train';

describe('TraceBuilder#build', () => {
  it('numbers persistent tensors first, and derives creates, updates and frees from first writes and last uses', () => {
    const trace = new TraceBuilder();
    const x = trace.tensor('x', 16);
    const w = trace.persistent('w', 8);
    const y = trace.tensor('y', 4);
    trace.op('make x', { writes: [x], flops: 0 });
    trace.op('x to y', { reads: [x, w], writes: [y], flops: 10 });
    trace.op('add into y', { reads: [x], writes: [y], flops: 4 });
    trace.op('update w', { reads: [y], writes: [w], flops: 2 });
    const { persistent, iteration } = trace.build();
    expect(persistent).to.deep.equal([{ id: 0, bytes: 8, name: 'w' }]);
    expect(iteration.tensors).to.deep.equal([
      { id: 1, bytes: 16, name: 'x' },
      { id: 2, bytes: 4, name: 'y' },
    ]);
    expect(iteration.ops.map(({ reads, creates, updates, frees, bytesAccessed }) => ({ reads, creates, updates, frees, bytesAccessed }))).to.deep.equal([
      { reads: [], creates: [1], updates: [], frees: [], bytesAccessed: 16 },
      { reads: [1, 0], creates: [2], updates: [], frees: [], bytesAccessed: 28 },
      { reads: [1], creates: [], updates: [2], frees: [1], bytesAccessed: 20 },
      { reads: [2], creates: [], updates: [0], frees: [2], bytesAccessed: 12 },
    ]);
  });

  it('refuses an op that reads a tensor no earlier op wrote, and a tensor that is never written', () => {
    const trace = new TraceBuilder();
    const x = trace.tensor('x', 16);
    expect(() => trace.op('read x', { reads: [x], flops: 0 })).to.throw(InvalidArgumentError);
    expect(() => trace.build()).to.throw(InvalidArgumentError);
  });
});
