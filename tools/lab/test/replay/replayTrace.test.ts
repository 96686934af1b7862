import { expect } from 'chai';
import type { AllocateOptions, Allocator } from '@stowage/core';
import { InvalidArgumentError, OutOfMemoryError } from '@stowage/core';
import { makeDirectAllocator } from '@stowage/core/plugin-kit';
import type { TraceEvent } from '@stowage/lab/replay';
import { findTraceRoot, listTraces, readTraceFile, ReplayStoppedError, replayTrace, traceSummary } from '@stowage/lab/replay';
import { VirtualMemoryBackend } from '@stowage/core/testing';

const alloc = (id: number, size: number, extra: Partial<TraceEvent> = {}): TraceEvent => ({ action: 'alloc', id, size, stream: 0, ...extra });
const freeRequested = (id: number): TraceEvent => ({ action: 'free_requested', id, size: 0, stream: 0 });
const freeCompleted = (id: number): TraceEvent => ({ action: 'free_completed', id, size: 0, stream: 0 });

function direct(capacityBytes?: number): { backend: VirtualMemoryBackend; allocator: Allocator } {
  const backend = new VirtualMemoryBackend(capacityBytes === undefined ? {} : { capacityBytes });
  return { backend, allocator: makeDirectAllocator(backend) };
}

describe('replayTrace', () => {
  it('refuses swapped arguments, events that are not trace events and bad options with InvalidArgumentError before allocating', () => {
    const { allocator } = direct();
    const events = [alloc(0, 64), freeRequested(0)];
    const bad: [() => unknown, RegExp][] = [
      [() => replayTrace(events as never, allocator as never), /allocator must be an Allocator/],
      [() => replayTrace(null as never, events), /allocator must be an Allocator/],
      [() => replayTrace(allocator, null as never), /events must be an array of trace events/],
      [() => replayTrace(allocator, [{ foo: 1 }] as never), /events\[0\]\.action/],
      [() => replayTrace(allocator, events, { scal: 2 } as never), /options\.scal.*did you mean scale\?/],
      [() => replayTrace(allocator, events, { streams: 'yes' } as never), /options\.streams must be true or false/],
      [() => replayTrace(allocator, events, { keepLive: 1 } as never), /options\.keepLive must be true or false/],
      [() => replayTrace(allocator, events, { freeAt: 'never' } as never), /options\.freeAt must be one of "completed", "requested"/],
      [() => replayTrace(allocator, events, { stopWhen: true } as never), /options\.stopWhen must be a function/],
      [() => replayTrace(allocator, events, { onProgress: 'log' } as never), /options\.onProgress must be a function/],
      [() => replayTrace(allocator, events, null as never), /options must be an options object/],
    ];
    for (const [call, pattern] of bad) {
      let error: unknown;
      try {
        call();
      } catch (caught) {
        error = caught;
      }
      expect(error, String(error)).to.be.instanceOf(InvalidArgumentError);
      expect((error as Error).message).to.match(pattern);
      expect(allocator.memoryStats()['allocation.all.allocated'], 'nothing allocated').to.equal(0);
    }
  });

  it('replays allocs and frees by id, counting ops and the peak of live requested bytes exactly', () => {
    const { backend, allocator } = direct();
    const result = replayTrace(allocator, [alloc(0, 100), alloc(1, 200), freeRequested(0), alloc(2, 50), freeRequested(1), freeRequested(2)]);
    expect(result).to.include({ ops: 6, allocs: 3, frees: 3, peakLiveBytes: 300, finalLiveBytes: 0 });
    expect(result.failedAt).to.equal(undefined);
    expect(result.seconds).to.be.at.least(0);
    expect(backend.peakReservedBytes).to.equal(300);
    expect(backend.mallocCount).to.equal(3);
    expect(allocator.memoryStats()['allocation.all.current']).to.equal(0);
  });

  it('allocates pre allocations like the others, skips segment and oom events, and frees what is left live', () => {
    const { backend, allocator } = direct();
    const events: TraceEvent[] = [
      alloc(0, 1000, { pre: true }),
      { action: 'segment_alloc', id: -1, size: 2 << 20, stream: 0 },
      alloc(1, 24),
      { action: 'oom', id: -1, size: 1 << 30, stream: 0 },
      freeRequested(1),
      { action: 'segment_free', id: -1, size: 2 << 20, stream: 0 },
    ];
    const result = replayTrace(allocator, events);
    expect(result).to.include({ ops: 3, peakLiveBytes: 1024, finalLiveBytes: 1000 });
    expect(backend.mallocCount).to.equal(2);
    expect(backend.reservedBytes).to.equal(0);
  });

  it('frees at free_completed where the trace has one for the id, else at free_requested', () => {
    const events = [alloc(0, 100), freeRequested(0), alloc(1, 200), freeCompleted(0), alloc(2, 400), freeRequested(2), alloc(3, 800), freeRequested(1), freeCompleted(1)];
    // id 0 leaves at its free_completed (after id 1 arrived); id 2 has no free_completed and leaves at free_requested.
    expect(replayTrace(direct().allocator, events).peakLiveBytes).to.equal(100 + 200 + 400 - 100 + 0 + 800 - 400 + 0);
    expect(replayTrace(direct().allocator, events, { freeAt: 'completed' }).peakLiveBytes).to.equal(1000);
  });

  it("frees at free_requested with freeAt 'requested'", () => {
    const events = [alloc(0, 100), freeRequested(0), alloc(1, 200), freeCompleted(0), freeRequested(1), freeCompleted(1)];
    expect(replayTrace(direct().allocator, events).peakLiveBytes).to.equal(300);
    const result = replayTrace(direct().allocator, events, { freeAt: 'requested' });
    expect(result).to.include({ peakLiveBytes: 200, ops: 4 });
  });

  it('skips frees of ids never allocated or already freed', () => {
    const result = replayTrace(direct().allocator, [freeRequested(9), alloc(0, 64), freeRequested(0), freeRequested(0), freeCompleted(7)], { freeAt: 'requested' });
    expect(result).to.include({ ops: 2, allocs: 1, frees: 1 });
  });

  it('multiplies sizes by scale, rounding up to whole bytes', () => {
    const { backend, allocator } = direct();
    expect(replayTrace(allocator, [alloc(0, 101), alloc(1, 1000)], { scale: 1.5 }).peakLiveBytes).to.equal(152 + 1500);
    expect(backend.peakReservedBytes).to.equal(152 + 1500);
    expect(replayTrace(direct().allocator, [alloc(0, 1000), alloc(1, 3)], { scale: 1.1 }).peakLiveBytes).to.equal(1100 + 4);
    expect(() => replayTrace(direct().allocator, [alloc(0, 1)], { scale: 0 })).to.throw(InvalidArgumentError, /options\.scale/);
  });

  it('records an OutOfMemoryError in failedAt instead of throwing, then frees what it holds', () => {
    const { backend, allocator } = direct(1024);
    const result = replayTrace(allocator, [alloc(0, 600), alloc(1, 600), freeRequested(0), freeRequested(1)]);
    expect(result.failedAt?.op).to.equal(1);
    expect(result.failedAt?.error).to.be.instanceOf(OutOfMemoryError);
    expect(result).to.include({ ops: 1, peakLiveBytes: 600, finalLiveBytes: 600 });
    expect(backend.reservedBytes).to.equal(0);
  });

  it("names the event of the operation that failed, past events that are not operations", () => {
    const { allocator } = direct(1024);
    const segment: TraceEvent = { action: 'segment_alloc', id: -1, size: 2048, stream: 0 };
    const result = replayTrace(allocator, [segment, alloc(0, 600), segment, alloc(1, 600)]);
    expect(result.failedAt).to.deep.include({ op: 1, event: 3 });
  });

  it('stops when stopWhen returns true, checking every 256 operations', () => {
    const { allocator } = direct();
    const events = Array.from({ length: 1000 }, (_, id) => alloc(id, 1));
    let calls = 0;
    const result = replayTrace(allocator, events, {
      stopWhen: () => {
        calls++;
        return allocator.memoryStats()['requested_bytes.all.current'] >= 300;
      },
    });
    expect(calls).to.equal(3); // at ops 0, 256 and 512
    expect(result.failedAt?.op).to.equal(512);
    expect(result.failedAt?.error).to.be.instanceOf(ReplayStoppedError);
    expect(result.ops).to.equal(512);
  });

  it('reports progress and, with keepLive, hands back the pointers still live', () => {
    const { backend, allocator } = direct();
    const progress: [number, number][] = [];
    const result = replayTrace(allocator, [alloc(0, 10), alloc(1, 20), freeRequested(0)], { keepLive: true, onProgress: (d, t) => progress.push([d, t]) });
    expect(progress).to.deep.equal([[3, 3]]);
    expect(result.live).to.have.length(1);
    expect(result.live![0]!.byteLength).to.equal(20);
    expect(backend.reservedBytes).to.equal(20);
    allocator.free(result.live![0]!);
  });

  it('allocates on stream ordinals in order of first appearance only when streams is set', () => {
    const allocator = makeDirectAllocator(new VirtualMemoryBackend({ streams: 2 }));
    const seen: (number | undefined)[] = [];
    const allocate = allocator.allocate.bind(allocator);
    allocator.allocate = (nbytes: number, options?: AllocateOptions) => {
      seen.push(options?.stream);
      return allocate(nbytes, options);
    };
    const events = [alloc(0, 1, { stream: 123 }), alloc(1, 1, { stream: 456 }), alloc(2, 1, { stream: 123 })];
    replayTrace(allocator, events, { streams: true });
    expect(seen).to.deep.equal([0, 1, 0]);
    seen.length = 0;
    replayTrace(allocator, events);
    expect(seen).to.deep.equal([undefined, undefined, undefined]);
  });

  it('throws InvalidArgumentError for an id allocated again while live, after freeing what it held', () => {
    const { backend, allocator } = direct();
    expect(() => replayTrace(allocator, [alloc(0, 8), alloc(0, 8)])).to.throw(InvalidArgumentError, /events\[1\]\.id/);
    expect(backend.reservedBytes).to.equal(0);
  });
});

describe('replayTrace on a shared trace', () => {
  it('replays a real PyTorch trace to the peak live bytes its summary counts', async function () {
    const root = findTraceRoot();
    if (root === undefined) {
      console.log('    skipped: the traces directory was not found (shared/traces beside the repository, or $STOWAGE_TRACES)');
      this.skip();
    }
    const traces = listTraces(root).filter((t) => t.kind === 'pytorch');
    const trace = traces.find((t) => t.name === 'cs336_forward_fp32_ctx128_b') ?? traces[0];
    if (trace === undefined) {
      console.log(`    skipped: ${root} holds no PyTorch traces`);
      this.skip();
    }
    const events = await readTraceFile(trace);
    const summary = traceSummary(events);
    const backend = new VirtualMemoryBackend({ storeData: false });
    using allocator = makeDirectAllocator(backend);
    const result = replayTrace(allocator, events, { freeAt: 'requested' });
    expect(result.failedAt).to.equal(undefined);
    expect(result.allocs).to.equal(summary.allocs);
    expect(result.peakLiveBytes).to.equal(summary.peakLiveBytes);
    expect(backend.peakReservedBytes).to.equal(summary.peakLiveBytes);
    expect(backend.reservedBytes).to.equal(0);
  });
});
