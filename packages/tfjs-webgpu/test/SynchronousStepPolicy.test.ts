import { expect } from 'chai';
import type { StorageImpl } from '@stowage/core';
import type { ReclaimCandidate } from '@stowage/lms';
import type { StepHints } from '@stowage/tfjs-webgpu';
import { stepRisk, SynchronousStepPolicy } from '@stowage/tfjs-webgpu';

const device = { type: 'webgpu', index: 0 } as const;

/** A candidate of `bytes` in a segment of its own (one segment per allocation), as LMS offers it. */
function candidate(name: string, bytes: number, fields: Partial<Omit<ReclaimCandidate, 'storage' | 'placement'>> = {}): ReclaimCandidate {
  const storage = { name, byteLength: bytes } as unknown as StorageImpl;
  const placement = { address: 0, size: bytes, segmentBytes: bytes, freeBefore: 0, freeAfter: 0, small: false, kind: 0, stream: 0 } as unknown as ReclaimCandidate['placement'];
  return { storage, placement, hasHostCopy: false, hostCopyReady: false, unpinnedAt: 0, ...fields };
}

function hints(read: readonly ReclaimCandidate[], saved: readonly ReclaimCandidate[] = []): StepHints {
  const readSet = new Set(read.map((c) => c.storage));
  const savedSet = new Set(saved.map((c) => c.storage));
  return { readSinceWritten: (s) => readSet.has(s), savedForBackward: () => savedSet };
}

const nameOf = (c: ReclaimCandidate | undefined): string | undefined => (c?.storage as unknown as { name: string } | undefined)?.name;

describe('SynchronousStepPolicy#chooseOne', () => {
  it('reclaims a tensor with a complete host copy before a dirty one, however recently it was unpinned', () => {
    const policy = new SynchronousStepPolicy();
    const dirty = candidate('dirty', 4096, { unpinnedAt: 1, nextUse: Number.POSITIVE_INFINITY });
    const clean = candidate('clean', 4096, { unpinnedAt: 9, hostCopyReady: true, hasHostCopy: true, nextUse: 3 });
    expect(nameOf(policy.chooseOne({ device, bytes: 4096 }, [dirty, clean]))).to.equal('clean');
  });

  it('takes a dirty tensor the learned sequence does not pin again this step before one it does', () => {
    const policy = new SynchronousStepPolicy();
    const needed = candidate('needed', 4096, { unpinnedAt: 1, nextUse: 40 });
    const done = candidate('done', 4096, { unpinnedAt: 2, nextUse: Number.POSITIVE_INFINITY });
    expect(nameOf(policy.chooseOne({ device, bytes: 4096 }, [needed, done]))).to.equal('done');
  });

  it('among tensors needed again, takes the one needed last (Belady)', () => {
    const policy = new SynchronousStepPolicy();
    const soon = candidate('soon', 4096, { unpinnedAt: 1, nextUse: 4 });
    const late = candidate('late', 4096, { unpinnedAt: 2, nextUse: 90 });
    expect(nameOf(policy.chooseOne({ device, bytes: 4096 }, [soon, late]))).to.equal('late');
  });

  it('where nothing is predicted, takes a tensor read since it was written before one not read yet, and never one saved for backward', () => {
    const policy = new SynchronousStepPolicy();
    const unread = candidate('unread', 4096, { unpinnedAt: 1 });
    const read = candidate('read', 4096, { unpinnedAt: 2 });
    const saved = candidate('saved', 4096, { unpinnedAt: 0 });
    policy.attach(hints([read, saved], [saved]));
    expect(nameOf(policy.chooseOne({ device, bytes: 4096 }, [unread, read, saved]))).to.equal('read');
    expect(stepRisk(saved, hints([read, saved], [saved]))).to.equal(3);
    expect(stepRisk({ ...saved, nextUse: Number.POSITIVE_INFINITY }, hints([], [saved])), 'saved for backward whatever the prediction').to.equal(3);
  });
});

describe('SynchronousStepPolicy#chooseFragments', () => {
  it('takes the safest candidates until their blocks add up to the request', () => {
    const policy = new SynchronousStepPolicy();
    const chosen = policy.chooseFragments({ device, bytes: 8192 }, [
      candidate('dirty', 4096, { unpinnedAt: 1, nextUse: 2 }),
      candidate('clean-a', 4096, { unpinnedAt: 5, hostCopyReady: true, hasHostCopy: true }),
      candidate('clean-b', 4096, { unpinnedAt: 6, hostCopyReady: true, hasHostCopy: true }),
    ]);
    expect(chosen.map(nameOf)).to.deep.equal(['clean-a', 'clean-b']);
  });
});
