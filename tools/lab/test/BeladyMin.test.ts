import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import type { OfflineOp, OfflineTensorId, OfflineTrace } from '@stowage/lab';
import { beladyMin, OfflineTraceRecorder } from '@stowage/lab';

const PAGE = 4096;

/** The classic reference string (Belady's anomaly example): MIN takes 7 misses with 3 frames and 6 with 4. */
const CLASSIC = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];

/** One op per access, each pinning one page-sized tensor; `createOnFirstUse` makes each first access allocate it. */
function classicTrace(createOnFirstUse: boolean): OfflineTrace {
  const seen = new Set<number>();
  const ops = CLASSIC.map((id): OfflineOp => {
    const first = !seen.has(id);
    seen.add(id);
    return createOnFirstUse && first ? { pins: [id], creates: [id] } : { pins: [id] };
  });
  return { tensors: [1, 2, 3, 4, 5].map((id) => ({ id, bytes: PAGE })), ops };
}

const evicted = (op: number, id: OfflineTensorId, pageOutBytes: number) => ({ op, id, pageOutBytes });

describe('beladyMin', () => {
  it('moves nothing when every op fits beside what is resident', () => {
    const trace: OfflineTrace = {
      tensors: [
        { id: 'w', bytes: 40 },
        { id: 'x', bytes: 30 },
        { id: 'y', bytes: 30 },
      ],
      ops: [
        { pins: ['w'], creates: ['w'] },
        { pins: ['w', 'x'], creates: ['x'] },
        { pins: ['w', 'x', 'y'], creates: ['y'], frees: ['x'] },
        { pins: ['y', 'w'], writes: ['w'] },
      ],
    };
    expect(beladyMin(trace, 100)).to.deep.equal({ fits: true, overBudgetOp: null, bytesMoved: 0, pageOutBytes: 0, pageInBytes: 0, evictions: [] });
  });

  it('misses 7 times on the classic reference string with 3 page slots, and 6 times with 4', () => {
    // Hand-worked, 3 slots: 1 2 3 miss; 4 evicts 3 (next used at op 9, farthest); 1 2 hit; 5 evicts 4 (op 10);
    // 1 2 hit; 3 evicts 1 (1 and 2 are never used again: tie, listed first); 4 evicts 2; 5 hits.
    const three = beladyMin(classicTrace(false), 3 * PAGE + PAGE / 2);
    expect(three.pageInBytes / PAGE, 'misses').to.equal(7);
    expect(three.pageOutBytes, 'every tensor keeps its host copy: nothing is written').to.equal(0);
    expect(three.evictions).to.deep.equal([evicted(3, 3, 0), evicted(6, 4, 0), evicted(9, 1, 0), evicted(10, 2, 0)]);
    expect(beladyMin(classicTrace(false), 4 * PAGE).pageInBytes / PAGE, 'misses with 4 slots').to.equal(6);
  });

  it('counts a created tensor as allocated, not paged in, and pages it out when it is evicted and used again', () => {
    // The same 7 misses: 5 creations and 2 page-ins (3 and 4). 3 and 4 were written by their creation, so evicting
    // them copies them out; 1 and 2 are never used again when evicted, so they are dropped.
    const result = beladyMin(classicTrace(true), 3 * PAGE);
    expect(result).to.deep.equal({
      fits: true,
      overBudgetOp: null,
      bytesMoved: 4 * PAGE,
      pageOutBytes: 2 * PAGE,
      pageInBytes: 2 * PAGE,
      evictions: [evicted(3, 3, PAGE), evicted(6, 4, PAGE), evicted(9, 1, 0), evicted(10, 2, 0)],
    });
  });

  // w exists on the host before the trace; x is created by op 1. Each op pins one of them, and the budget holds one.
  const alternating = (writes: boolean): OfflineTrace => ({
    tensors: [
      { id: 'w', bytes: 60 },
      { id: 'x', bytes: 50 },
    ],
    ops: [
      { pins: ['w'] },
      { pins: ['x'], creates: ['x'] },
      { pins: ['w'] },
      writes ? { pins: ['x'], writes: ['x'] } : { pins: ['x'] },
      { pins: ['w'] },
      { pins: ['x'] },
    ],
  });

  it('evicts a tensor whose host copy is still valid without paging it out again', () => {
    // Page-ins: w (op 0), w (2), x (3), w (4), x (5). The one page-out is x at op 2: its creation wrote it. At op 4
    // x was paged in at op 3 and not written since, so its eviction copies nothing; w is never written.
    expect(beladyMin(alternating(false), 100)).to.deep.equal({
      fits: true,
      overBudgetOp: null,
      bytesMoved: 50 + 60 + 60 + 50 + 60 + 50,
      pageOutBytes: 50,
      pageInBytes: 60 + 60 + 50 + 60 + 50,
      evictions: [evicted(1, 'w', 0), evicted(2, 'x', 50), evicted(3, 'w', 0), evicted(4, 'x', 0), evicted(5, 'w', 0)],
    });
  });

  it('pages a tensor out again when an op wrote it after it was paged in', () => {
    const result = beladyMin(alternating(true), 100);
    expect(result.evictions[3], 'x written at op 3').to.deep.equal(evicted(4, 'x', 50));
    expect(result.pageOutBytes).to.equal(100);
    expect(result.pageInBytes).to.equal(280);
  });

  it('frees a dead tensor without evicting it and drops a tensor never used again at no cost', () => {
    const trace = (freed: boolean): OfflineTrace => ({
      tensors: [
        { id: 'a', bytes: 60 },
        { id: 'b', bytes: 60 },
      ],
      ops: [{ pins: ['a'], creates: ['a'] }, freed ? { pins: ['a'], frees: ['a'] } : { pins: ['a'] }, { pins: ['b'], creates: ['b'] }],
    });
    expect(beladyMin(trace(true), 100)).to.deep.include({ bytesMoved: 0, evictions: [] });
    expect(beladyMin(trace(false), 100), 'a is live but never used again').to.deep.include({
      bytesMoved: 0,
      evictions: [evicted(2, 'a', 0)],
    });
  });

  it('reports fits false, moving nothing, when one op pins more bytes than the budget', () => {
    const trace: OfflineTrace = {
      tensors: [
        { id: 'a', bytes: 60 },
        { id: 'b', bytes: 41 },
      ],
      ops: [{ pins: ['a'], creates: ['a'] }, { pins: ['b'], creates: ['b'] }, { pins: ['a', 'b', 'a'] }],
    };
    expect(beladyMin(trace, 100)).to.deep.equal({ fits: false, overBudgetOp: 2, bytesMoved: 0, pageOutBytes: 0, pageInBytes: 0, evictions: [] });
    expect(beladyMin(trace, 101).fits, 'pins of exactly the budget fit').to.equal(true);
  });

  // Budget 100. a (50), b (30) and c (20) are created by ops 0-2; d (40) exists on the host. Later uses:
  // a at ops 3 and 8, b at 5, 7, 8, c at 6 and 10, d at 4, 7, 9.
  const sized: OfflineTrace = {
    tensors: [
      { id: 'a', bytes: 50 },
      { id: 'b', bytes: 30 },
      { id: 'c', bytes: 20 },
      { id: 'd', bytes: 40 },
    ],
    ops: [
      { pins: ['a'], creates: ['a'] },
      { pins: ['b'], creates: ['b'] },
      { pins: ['c'], creates: ['c'] },
      { pins: ['a'] },
      { pins: ['d'] },
      { pins: ['b'] },
      { pins: ['c'] },
      { pins: ['d', 'b'] },
      { pins: ['a', 'b'] },
      { pins: ['d'] },
      { pins: ['c'] },
    ],
  };

  it('evicts the tensor used farthest in the future, not the least recently used, when sizes differ', () => {
    // Op 4 brings d (40) into a full budget. Next uses: a at op 8, b at 5, c at 6. LRU would take b, then c (b alone
    // frees too little); MIN takes a, the most recently used, which alone makes room.
    expect(beladyMin(sized, 100).evictions[0]).to.deep.equal(evicted(4, 'a', 50));
  });

  it('keeps evicting by farthest next use even where one nearer tensor alone would make room', () => {
    // Op 8 brings a (50) back beside b, c, d (90). Next uses: c at op 10, d at 9. MIN evicts c (20, written: paged
    // out), which is not enough, then d (clean: dropped to its host copy). Evicting d alone would have made room and
    // saved c's 20 out and 20 in; with sizes, farthest next use is a heuristic. Op 9 brings d back, dropping a
    // (never used again, larger than b); op 10 brings c back.
    expect(beladyMin(sized, 100)).to.deep.equal({
      fits: true,
      overBudgetOp: null,
      bytesMoved: 220,
      pageOutBytes: 50 + 20,
      pageInBytes: 40 + 50 + 40 + 20,
      evictions: [evicted(4, 'a', 50), evicted(8, 'c', 20), evicted(8, 'd', 0), evicted(9, 'a', 0)],
    });
  });

  it('rejects a trace that breaks its rules, and a budget that is not whole bytes', () => {
    const tensors = [
      { id: 'a', bytes: 8 },
      { id: 'b', bytes: 8 },
    ];
    const rejects = (ops: OfflineOp[], pattern: RegExp) =>
      expect(() => beladyMin({ tensors, ops }, 64)).to.throw(InvalidArgumentError, pattern);
    rejects([{ pins: ['z'] }], /trace\.ops\[0\]\.pins\[0\] must be a tensor listed in trace\.tensors/);
    rejects([{ pins: ['a'], creates: ['b'] }], /trace\.ops\[0\]\.creates must be also in trace\.ops\[0\]\.pins/);
    rejects([{ pins: ['a'], writes: ['b'] }], /trace\.ops\[0\]\.writes must be also in trace\.ops\[0\]\.pins/);
    rejects([{ pins: ['a'] }, { pins: ['a'], creates: ['a'] }], /trace\.ops\[0\]\.pins must be a tensor created by this op or an earlier one/);
    rejects([{ pins: ['a'], creates: ['a'] }, { pins: ['a'], creates: ['a'] }], /a tensor no other op creates \(op 0 does\)/);
    rejects([{ pins: ['a'], frees: ['a'] }, { pins: ['a'] }], /trace\.ops\[1\]\.pins must be a tensor not freed by an earlier op/);
    rejects([{ pins: [], frees: ['a'] }, { pins: [], frees: ['a'] }], /a tensor no earlier op frees \(op 0 does\)/);
    expect(() => beladyMin({ tensors: [...tensors, { id: 'a', bytes: 1 }], ops: [] }, 64)).to.throw(InvalidArgumentError, /tensors\[2\]\.id must be unique/);
    expect(() => beladyMin({ tensors: [{ id: 'a', bytes: 1.5 }], ops: [] }, 64)).to.throw(InvalidArgumentError, /bytes must be a non-negative whole number/);
    expect(() => beladyMin({ tensors, ops: [] }, -1)).to.throw(InvalidArgumentError, /budgetBytes must be a non-negative whole number/);
  });

  it('names its first argument, or the first bad part of it, when the trace is not an OfflineTrace', () => {
    for (const trace of [null, undefined, 42, 'trace', []]) {
      expect(() => beladyMin(trace as never, 64), String(trace)).to.throw(InvalidArgumentError, /^trace must be an OfflineTrace: \{ tensors/);
    }
    expect(() => beladyMin({ ops: [] } as never, 64)).to.throw(InvalidArgumentError, /^trace\.tensors must be an array/);
    expect(() => beladyMin({ tensors: [], ops: {} } as never, 64)).to.throw(InvalidArgumentError, /^trace\.ops must be an array/);
    expect(() => beladyMin({ tensors: [null], ops: [] } as never, 64)).to.throw(InvalidArgumentError, /^trace\.tensors\[0\] must be an object \{ id, bytes \}/);
    expect(() => beladyMin({ tensors: [], ops: [7] } as never, 64)).to.throw(InvalidArgumentError, /^trace\.ops\[0\] must be an OfflineOp/);
    expect(() => beladyMin({ tensors: [], ops: [{ pins: 'a' }] } as never, 64)).to.throw(InvalidArgumentError, /^trace\.ops\[0\]\.pins must be an array of tensor ids/);
  });
});

describe('OfflineTraceRecorder', () => {
  it('numbers keys as first seen, creates a key first seen written, and frees a released key after the last op', () => {
    const w = { bytes: 40 }; // a weight: only read, so it exists on the host before the trace
    const x = { bytes: 30 };
    const y = { bytes: 30 };
    const recorder = new OfflineTraceRecorder<{ bytes: number }>((key) => key.bytes);
    recorder.recordOp([w], [x]); // x = f(w): x is pinned because it is written
    recorder.recordOp([x, w], [y, x]); // y = g(x, w), and x is updated in place
    recorder.recordRelease(x);
    recorder.recordRelease({ bytes: 1 }); // never used by an op: ignored
    recorder.recordOp([y], [w]);
    recorder.recordOp([x]); // a released key seen again is a new tensor, existing on the host
    expect(recorder.trace()).to.deep.equal({
      tensors: [
        { id: 0, bytes: 40 },
        { id: 1, bytes: 30 },
        { id: 2, bytes: 30 },
        { id: 3, bytes: 30 },
      ],
      ops: [
        { pins: [0, 1], creates: [1] },
        { pins: [1, 0, 2], creates: [2], writes: [1], frees: [1] },
        { pins: [2, 0], writes: [0] },
        { pins: [3] },
      ],
    });
  });

  it('records a trace beladyMin replays', () => {
    const recorder = new OfflineTraceRecorder<{ bytes: number }>((key) => key.bytes);
    const [a, b, c] = [{ bytes: 60 }, { bytes: 50 }, { bytes: 40 }];
    recorder.recordOp([], [a]);
    recorder.recordOp([], [b]); // evicts a (written, used again): 60 out
    recorder.recordOp([a, c], [c]); // evicts b (never used again: dropped); a comes back: 60 in
    recorder.recordRelease(a);
    expect(beladyMin(recorder.trace(), 100)).to.deep.include({ fits: true, pageOutBytes: 60, pageInBytes: 60 });
  });
});
