import { expect } from 'chai';
import type { Allocator } from '@stowage/core';
import type { RmmLogRecord } from '@stowage/core/plugin-kit';
import { CachingAllocator, createCpuAllocator, InvalidArgumentError, LoggingAllocator, OutOfMemoryError } from '@stowage/core';
import { parseRmmCsv, RMM_CSV_HEADER } from '@stowage/core/plugin-kit';
import { VirtualMemoryBackend, describeAllocatorContract } from '@stowage/core/testing';
import { expectRefusedOptions } from './refusedOptions.js';

describeAllocatorContract('LoggingAllocator over the CPU allocator', () => new LoggingAllocator(createCpuAllocator(), () => {}));

/** A clock the test moves by hand, in milliseconds. */
class FakeClock {
  ms = 5000;
  readonly now = (): number => this.ms;
}

/** A LoggingAllocator over `upstream` writing to an array, with a fake clock. */
/** A caching engine over a virtual device with streams 0-9 (the CPU has only stream 0). */
function multiStream(capacityBytes = 2 ** 40): Allocator {
  return new CachingAllocator(new VirtualMemoryBackend({ device: 'cpu', streams: 10, capacityBytes }), { preset: 'pytorch' });
}

function logged(upstream: Allocator = multiStream(), options: { threadId?: number; stream?: number } = {}) {
  const lines: string[] = [];
  const clock = new FakeClock();
  const allocator = new LoggingAllocator(upstream, (line) => lines.push(line), { ...options, clock: clock.now });
  return { allocator, lines, clock };
}

const hex = (address: number): string => `0x${address.toString(16)}`;

describe('LoggingAllocator#constructor', () => {
  it('refuses unknown option keys (naming the nearest) and option values of the wrong type with InvalidArgumentError', () => {
    expectRefusedOptions((options) => new LoggingAllocator(createCpuAllocator(), () => undefined, options), [
      [{ threadID: 1 }, /did you mean threadId\?/],
      [{ clock: 5 }, /options\.clock/],
    ]);
  });

  it('writes the RMM CSV header first', () => {
    const { allocator, lines } = logged();
    expect(lines).to.deep.equal(['Thread,Time,Action,Pointer,Size,Stream']);
    expect(RMM_CSV_HEADER).to.equal(lines[0]);
    allocator.dispose();
  });

  it('rejects a sink, clock, thread id or stream of the wrong kind', () => {
    const cpu = createCpuAllocator();
    expect(() => new LoggingAllocator(cpu, 'stdout' as never)).to.throw(InvalidArgumentError).with.property('argument', 'sink');
    expect(() => new LoggingAllocator(cpu, () => {}, { clock: 5 as never })).to.throw(InvalidArgumentError).with.property('argument', 'options.clock');
    expect(() => new LoggingAllocator(cpu, () => {}, { threadId: -1 })).to.throw(InvalidArgumentError).with.property('argument', 'options.threadId');
    expect(() => new LoggingAllocator(cpu, () => {}, { stream: 0.5 })).to.throw(InvalidArgumentError).with.property('argument', 'options.stream');
    expect(() => new LoggingAllocator(undefined as never, () => {})).to.throw(InvalidArgumentError).with.property('argument', 'upstream');
    cpu.dispose();
  });
});

describe('LoggingAllocator#allocate', () => {
  it('logs allocate and free lines with seconds since construction to the microsecond', () => {
    const { allocator, lines, clock } = logged();
    clock.ms += 0.125;
    const a = allocator.allocate(1024);
    clock.ms += 1.5;
    const b = allocator.allocate(7, { stream: 3 });
    clock.ms += 2000;
    allocator.free(a);
    clock.ms += 0.0004;
    b.release();
    expect(lines.slice(1)).to.deep.equal([
      `0,0.000125,allocate,${hex(a.address)},1024,0`,
      `0,0.001625,allocate,${hex(b.address)},7,3`,
      `0,2.001625,free,${hex(a.address)},1024,0`,
      `0,2.001625,free,${hex(b.address)},7,3`,
    ]);
    allocator.dispose();
  });

  it('writes the thread id and default stream it was given', () => {
    const { allocator, lines } = logged(multiStream(), { threadId: 4, stream: 9 });
    const ptr = allocator.allocate(16);
    allocator.free(ptr);
    expect(lines.slice(1)).to.deep.equal([`4,0.000000,allocate,${hex(ptr.address)},16,9`, `4,0.000000,free,${hex(ptr.address)},16,9`]);
    allocator.dispose();
  });

  it('logs an allocate failure with pointer 0x0 and rethrows the OutOfMemoryError', () => {
    const { allocator, lines, clock } = logged(multiStream(1 << 20));
    clock.ms += 1;
    expect(() => allocator.allocate(2 << 20, { stream: 1 })).to.throw(OutOfMemoryError);
    expect(lines.slice(1)).to.deep.equal(['0,0.001000,allocate failure,0x0,2097152,1']);
    allocator.dispose();
  });

  it('logs nothing for a request rejected for its arguments', () => {
    const { allocator, lines } = logged();
    expect(() => allocator.allocate(-1)).to.throw(InvalidArgumentError);
    expect(() => allocator.allocate(8, { stream: -2 })).to.throw(InvalidArgumentError).with.property('argument', 'options.stream');
    expect(lines).to.have.length(1);
    allocator.dispose();
  });

  it('frees the pointer and propagates the error when the sink throws on the allocate line', () => {
    const cpu = createCpuAllocator();
    let calls = 0;
    const allocator = new LoggingAllocator(cpu, () => {
      if (calls++ > 0) throw new Error('disk full');
    });
    expect(() => allocator.allocate(64)).to.throw('disk full');
    expect(cpu.memoryStats()['allocation.all.current']).to.equal(0);
    allocator.dispose();
  });
});

describe('LoggingAllocator#free', () => {
  it('logs a pointer released after the adaptor was disposed', () => {
    const { allocator, lines } = logged();
    const ptr = allocator.allocate(32);
    allocator.dispose();
    ptr.release();
    expect(lines.at(-1)).to.match(/^0,0\.000000,free,0x[0-9a-f]+,32,0$/);
  });

  it('logs a double free not at all', () => {
    const { allocator, lines } = logged();
    const ptr = allocator.allocate(32);
    allocator.free(ptr);
    expect(() => allocator.free(ptr)).to.throw(/already released/);
    expect(lines).to.have.length(3);
    allocator.dispose();
  });
});

describe('LoggingAllocator + parseRmmCsv', () => {
  it('round-trips a sequence of allocations, frees and failures', () => {
    const { allocator, lines, clock } = logged(multiStream(4 << 20), { threadId: 2 });
    const expected: RmmLogRecord[] = [];
    const step = (ms: number): number => {
      clock.ms += ms;
      return Math.round((clock.ms - 5000) * 1000) / 1e6;
    };
    const sizes = [100, 0, 65_536, 5 << 20, 3 << 20, 4096, 7];
    sizes.forEach((size, i) => {
      const timeSeconds = step(0.25 + i);
      const stream = i % 3;
      try {
        const ptr = allocator.allocate(size, { stream });
        expected.push({ thread: 2, timeSeconds, action: 'allocate', address: ptr.address, size, stream });
        if (i % 2 === 1) {
          const freeTime = step(0.5);
          ptr.release();
          expected.push({ thread: 2, timeSeconds: freeTime, action: 'free', address: ptr.address, size, stream });
        }
      } catch (error) {
        expect(error).to.be.instanceOf(OutOfMemoryError);
        expected.push({ thread: 2, timeSeconds, action: 'allocate failure', address: 0, size, stream });
      }
    });
    expect(expected.map((r) => r.action)).to.include('allocate failure');

    const records = parseRmmCsv(lines.join('\n') + '\n');

    expect(records).to.deep.equal(expected);
    allocator.dispose();
  });
});
