import { expect } from 'chai';
import type { Allocator, DataPtr } from '@stowage/core';
import { createCpuAllocator, ForwardingAllocator, InvalidArgumentError, TrackingAllocator } from '@stowage/core';
import { describeAllocatorContract } from '@stowage/core/testing';
import { expectRefusedOptions } from './refusedOptions.js';

describeAllocatorContract('TrackingAllocator over the CPU allocator', () => new TrackingAllocator(createCpuAllocator()));
describeAllocatorContract('TrackingAllocator over the CPU allocator, without stacks', () => new TrackingAllocator(createCpuAllocator(), { captureStacks: false }));

/** Allocates from a named function, so that the stack has a frame to look for. */
function allocateForTheModel(allocator: Allocator, nbytes: number): DataPtr {
  return allocator.allocate(nbytes);
}

describe('TrackingAllocator#constructor', () => {
  it('refuses unknown option keys (naming the nearest) and option values of the wrong type with InvalidArgumentError', () => {
    expectRefusedOptions((options) => new TrackingAllocator(createCpuAllocator(), options), [
      [{ captureStack: false }, /did you mean captureStacks\?/],
      [{ captureStacks: 'no' }, /options\.captureStacks must be true or false/],
    ]);
  });

  it('rejects an upstream that is not an allocator and a captureStacks that is not a boolean', () => {
    expect(() => new TrackingAllocator(42 as never)).to.throw(InvalidArgumentError).with.property('argument', 'upstream');
    expect(() => new TrackingAllocator(createCpuAllocator(), { captureStacks: 'yes' as never }))
      .to.throw(InvalidArgumentError)
      .with.property('argument', 'options.captureStacks');
  });
});

describe('TrackingAllocator#outstanding', () => {
  it('lists live allocations oldest first with their size, address and stack', () => {
    using allocator = new TrackingAllocator(createCpuAllocator());
    const a = allocator.allocate(100);
    const b = allocateForTheModel(allocator, 2000);
    const records = allocator.outstanding();
    expect(records.map((r) => [r.ptr, r.address, r.bytes])).to.deep.equal([
      [a, a.address, 100],
      [b, b.address, 2000],
    ]);
    expect(allocator.outstandingBytes).to.equal(2100);
    expect(records[1]!.stack!.split('\n')[0], 'the innermost frame is the caller').to.match(/^at allocateForTheModel /);
    allocator.free(a);
    allocator.free(b);
  });

  it('drops the adaptor’s own frames from the stack', () => {
    using allocator = new TrackingAllocator(new ForwardingAllocator(createCpuAllocator()));
    using _ptr = allocator.allocate(8);
    const stack = allocator.outstanding()[0]!.stack!;
    expect(stack).to.not.match(/TrackingAllocator\.js/);
    expect(stack).to.not.match(/^Error/);
    expect(stack).to.contain('TrackingAllocator.test.js');
  });

  it('drops a record when its pointer is released through free() or ptr.release()', () => {
    using allocator = new TrackingAllocator(createCpuAllocator());
    const a = allocator.allocate(10);
    const b = allocator.allocate(20);
    const c = allocator.allocate(30);
    allocator.free(a);
    c.release();
    expect(allocator.outstanding().map((r) => r.ptr)).to.deep.equal([b]);
    expect(allocator.outstandingBytes).to.equal(20);
    b.release();
    expect(allocator.outstanding()).to.deep.equal([]);
    expect(allocator.outstandingBytes).to.equal(0);
  });

  it('records no stack when captureStacks is false', () => {
    using allocator = new TrackingAllocator(createCpuAllocator(), { captureStacks: false });
    using _ptr = allocator.allocate(8);
    expect(allocator.outstanding()[0]!.stack).to.equal(undefined);
  });

  it('keeps tracking a pointer that outlived the adaptor until it is released', () => {
    const allocator = new TrackingAllocator(createCpuAllocator());
    const ptr = allocator.allocate(8);
    allocator.dispose();
    expect(allocator.outstandingBytes).to.equal(8);
    ptr.release();
    expect(allocator.outstanding()).to.have.length(0);
  });
});

describe('TrackingAllocator#reportLeaks', () => {
  it('returns an empty string when nothing is outstanding', () => {
    using allocator = new TrackingAllocator(createCpuAllocator());
    allocator.free(allocator.allocate(64));
    expect(allocator.reportLeaks()).to.equal('');
  });

  it('lists each leak with its size, address and a stack that mentions the allocating file', () => {
    using allocator = new TrackingAllocator(createCpuAllocator());
    const leak = allocateForTheModel(allocator, 3 << 20);
    const other = allocator.allocate(512);
    const report = allocator.reportLeaks();
    const lines = report.split('\n');
    expect(lines[0]).to.equal('2 allocations (3.00 MiB) still outstanding on cpu:0:');
    expect(lines[1]).to.equal(`  3.00 MiB at 0x${leak.address.toString(16)}, allocated`);
    expect(lines[2]).to.match(/^ {6}at allocateForTheModel .*TrackingAllocator\.test\.js/);
    expect(report).to.contain(`  512 B at 0x${other.address.toString(16)}, allocated`);
    expect(lines.filter((l) => l.startsWith('      at ')), 'at most five frames per leak').to.have.length.at.most(10);
    leak.release();
    other.release();
  });

  it('shows as many frames per leak as asked', () => {
    using allocator = new TrackingAllocator(createCpuAllocator());
    using _ptr = allocateForTheModel(allocator, 1);
    const lines = allocator.reportLeaks(1).split('\n');
    expect(lines).to.have.length(3);
    expect(lines[0]).to.equal('1 allocation (1 B) still outstanding on cpu:0:');
    expect(allocator.reportLeaks(0).split('\n')).to.have.length(2);
    expect(() => allocator.reportLeaks(-1)).to.throw(InvalidArgumentError).with.property('argument', 'framesPerLeak');
  });

  it('says when no stack was captured', () => {
    using allocator = new TrackingAllocator(createCpuAllocator(), { captureStacks: false });
    const ptr = allocator.allocate(1024);
    expect(allocator.reportLeaks()).to.equal(`1 allocation (1.00 KiB) still outstanding on cpu:0:\n  1.00 KiB at 0x${ptr.address.toString(16)} (no stack captured)`);
    ptr.release();
  });
});
