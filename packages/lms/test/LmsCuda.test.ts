import { expect } from 'chai';
import type { AllocatorStats, Runtime, StorageImpl } from '@stowage/core';
import { cpu, createRuntime, resolve } from '@stowage/core';
import { patternBytes } from '@stowage/core/testing';
import type { CudaAllocator } from '@stowage/allocator-cuda';
import { cuda } from '@stowage/allocator-cuda';
import { testLibcuda } from '@stowage/allocator-cuda/testing';
import { LmsController, lms, StorageResidency, PageInPendingError, pin, pinAsync } from '@stowage/lms';

const MiB = 1 << 20;
/** Four 1 MiB storages fill the budget (one segment per allocation); a fifth reclaims one. */
const BUDGET = 4 * MiB;

function lmsOf(storage: StorageImpl): StorageResidency {
  expect(storage.lms).to.be.instanceOf(StorageResidency);
  return storage.lms as StorageResidency;
}

function stats(rt: Runtime): AllocatorStats & Record<string, number> {
  return rt.allocator('cuda:0').memoryStats() as AllocatorStats & Record<string, number>;
}

async function expectBytes(rt: Runtime, storage: StorageImpl, seed: number): Promise<void> {
  const bytes = await rt.read(storage);
  expect(Buffer.from(bytes).equals(Buffer.from(patternBytes(storage.byteLength, seed))), `bytes of storage ${seed}`).to.equal(true);
}

describe('LMS on CUDA', function () {
  this.timeout(60_000);
  const lib = testLibcuda();
  if (typeof lib === 'string') {
    it('pages through a libcuda (skipped: none could be loaded or built)', function () {
      console.log(`    skipped: ${lib}`);
      this.skip();
    });
    return;
  }
  const path = lib.path;

  function lmsRuntime(): Promise<Runtime> {
    return createRuntime({ plugins: [cpu(), cuda({ libcuda: path, limit: BUDGET, segmentSize: (r) => r, splitBlocks: false, expandableSegments: false }), lms({ devices: ['cuda'] })] });
  }

  function inactiveStorage(rt: Runtime, seed: number): StorageImpl {
    const storage = rt.storage(MiB, { device: 'cuda:0' });
    rt.write(storage, patternBytes(MiB, seed));
    pin(storage).release();
    return storage;
  }

  it('reclaims under the budget through the CUDA pager and keeps every byte through page-out and page-in', async () => {
    await using rt = await lmsRuntime();
    const storages = Array.from({ length: 8 }, (_, seed) => inactiveStorage(rt, seed));
    expect(stats(rt).reclaimed).to.equal(4);
    expect(stats(rt)['reserved_bytes.all.peak']).to.be.at.most(BUDGET);
    for (const [seed, storage] of storages.entries()) {
      using _guard = await pinAsync(storage);
      expect(storage.lms!.state).to.equal('active');
      await expectBytes(rt, storage, seed);
    }
    const after = stats(rt);
    expect(after.page_out).to.be.at.least(8);
    expect(after.page_in).to.be.at.least(4);
    expect(after['reserved_bytes.all.peak'], 'never over the budget').to.be.at.most(BUDGET);
    expect((rt.allocator('cuda:0') as unknown as { upstream: CudaAllocator }).upstream.pager.pinnedBytes, 'staging is pinned host memory').to.be.greaterThan(0);
  });

  it('does not block on a page-out: the bytes reach the host later, a synchronous pin meanwhile is PageInPendingError, and pinAsync waits', async () => {
    await using rt = await lmsRuntime();
    const storage = inactiveStorage(rt, 5);
    resolve(rt.container, LmsController).reclaimInactive({ type: 'cuda', index: 0 });
    expect([lmsOf(storage).state, lmsOf(storage).hostCopyReady], 'reclaimed, copy in flight').to.deep.equal(['reclaimed', false]);
    expect(() => pin(storage)).to.throw(PageInPendingError);
    {
      using _guard = await pinAsync(storage);
      expect(storage.lms!.state).to.equal('active');
    }
    await expectBytes(rt, storage, 5);
  });
});
