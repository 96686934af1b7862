import { expect } from 'chai';
import type { Allocator, DataPtr, LmsStorage, Plugin, TensorImpl } from '@stowage/core';
import {
  AllocatorFactory,
  createCpuAllocator,
  createRuntime,
  DisposedError,
  FailureCallbackAllocator,
  ForwardingAllocator,
  formatBytes,
  isStowageError,
  LoggingAllocator,
  parseBytes,
  StatisticsAllocator,
  StorageHooks,
  TensorHooks,
  TrackingAllocator,
  UseAfterReleaseError,
  wrapAllocators,
} from '@stowage/core';

/** A plugin registering one storage hook. */
function storageHooks(hooks: StorageHooks): Plugin {
  return { name: 'hooks', register: (c) => void c.register(StorageHooks, { useValue: hooks }) };
}

describe('Review4', () => {
  describe('StorageImpl#resize', () => {
    it('keeps a shared (SharedArrayBuffer-backed) storage shared after a resize', async () => {
      await using rt = await createRuntime();
      const s = rt.storage(16, { shared: true, resizable: true });
      expect(s.data().handle).to.be.instanceOf(SharedArrayBuffer);
      s.resize(32);
      expect(s.data().handle, 'the storage was made with { shared: true }').to.be.instanceOf(SharedArrayBuffer);
    });
  });

  describe('StorageImpl#release', () => {
    it('leaves no storage live after dispose when a beforeRelease hook throws, and runs that hook once', async () => {
      let calls = 0;
      const rt = await createRuntime({
        plugins: [
          storageHooks({
            beforeRelease: () => {
              calls++;
              throw new Error('hook failed');
            },
          }),
        ],
      });
      const s = rt.storage(64);
      expect(() => s.release()).to.throw(/hook failed/);
      await rt.dispose().then(
        () => undefined,
        () => undefined,
      );
      expect(() => s.data(), 'the storage outlives its disposed runtime and hands out freed memory').to.throw(UseAfterReleaseError);
      expect(calls, 'beforeRelease runs again for the same storage on every retry').to.equal(1);
    });

    it('refuses to release a storage whose LMS object is active (pinned), leaving it intact', async () => {
      let lmsReleased = 0;
      const lms = { state: 'active' as LmsStorage['state'], pin() {}, unpin() {}, release: () => void lmsReleased++ };
      class LmsAllocator extends ForwardingAllocator {
        override asLmsStorage(): LmsStorage {
          return lms;
        }
      }
      await using rt = await createRuntime({ plugins: [wrapAllocators('cpu', (a) => new LmsAllocator(a))] });
      const s = rt.storage(64);
      let error: unknown;
      try {
        s.release();
      } catch (e) {
        error = e;
      }
      lms.state = 'inactive'; // let the runtime's dispose release it
      expect(lmsReleased, 'LmsStorage.release() is documented never to be called while pinned').to.equal(0);
      expect(s.isReleased).to.equal(false);
      expect(isStowageError(error), 'a typed error').to.equal(true);
    });
  });

  describe('Runtime#storage', () => {
    it('releases the LMS object when an afterCreate hook throws', async () => {
      let lmsReleased = 0;
      class LmsAllocator extends ForwardingAllocator {
        override asLmsStorage(): LmsStorage {
          return { state: 'allocated', pin() {}, unpin() {}, release: () => void lmsReleased++ };
        }
      }
      await using rt = await createRuntime({
        plugins: [
          wrapAllocators('cpu', (a) => new LmsAllocator(a)),
          storageHooks({
            afterCreate: () => {
              throw new Error('afterCreate failed');
            },
          }),
        ],
      });
      expect(() => rt.storage(64)).to.throw(/afterCreate failed/);
      expect(rt.allocator().memoryStats()['allocation.all.current']).to.equal(0);
      expect(lmsReleased, 'the LMS object of the storage that was never handed out').to.equal(1);
    });
  });

  describe('Runtime#dispose', () => {
    it('disposes every allocator even when one allocator throws on dispose', async () => {
      const npu: Plugin = {
        name: 'npu',
        register: (c) =>
          void c.register(AllocatorFactory, {
            useValue: {
              deviceType: 'npu',
              create: (device: { type: string; index: number }) => {
                const a = createCpuAllocator();
                return new (class extends ForwardingAllocator {
                  override get device() {
                    return device;
                  }
                  override dispose(): void {
                    super.dispose();
                    throw new Error('npu dispose failed');
                  }
                })(a);
              },
            },
          }),
      };
      const rt = await createRuntime({ plugins: [npu] });
      rt.allocator('npu');
      const cpuAllocator = rt.allocator('cpu');
      await rt.dispose().catch(() => undefined);
      expect(() => cpuAllocator.allocate(8), 'the cpu allocator was left undisposed').to.throw(DisposedError);
    });
  });

  describe('adaptors after dispose', () => {
    const makers: [string, (a: Allocator) => Allocator][] = [
      ['StatisticsAllocator', (a) => new StatisticsAllocator(a, { ownsUpstream: false })],
      ['TrackingAllocator', (a) => new TrackingAllocator(a, { ownsUpstream: false })],
      ['LoggingAllocator', (a) => new LoggingAllocator(a, () => {}, { ownsUpstream: false })],
      ['FailureCallbackAllocator', (a) => new FailureCallbackAllocator(a, () => false, { ownsUpstream: false })],
    ];
    for (const [name, make] of makers) {
      it(`${name} refuses allocate() after dispose when it does not own its upstream`, () => {
        using base = createCpuAllocator();
        const adaptor = make(base);
        adaptor.dispose();
        expect(() => adaptor.allocate(8)).to.throw(DisposedError);
      });
    }

  });

  describe('TensorImpl#clone', () => {
    it('runs the tensor beforeRead hooks: clone() reads the tensor', async () => {
      const reads: TensorImpl[] = [];
      const hooks: TensorHooks = { beforeRead: (t) => void reads.push(t) };
      await using rt = await createRuntime({ plugins: [{ name: 'th', register: (c) => void c.register(TensorHooks, { useValue: hooks }) }] });
      const t = rt.tensor([2, 3]).asStrided([3, 2], [1, 3]);
      t.clone();
      expect(reads).to.include(t);
    });

    it('refuses to clone an empty tensor whose storage was released', async () => {
      await using rt = await createRuntime();
      const t = rt.tensor([0, 3]);
      t.storage.release();
      expect(() => t.clone()).to.throw(UseAfterReleaseError);
    });

  });

  describe('parseBytes', () => {
    it('rejects a fractional byte count written as text, as it does as a number', () => {
      expect(parseBytes(1.5)).to.equal(undefined);
      expect(parseBytes('1.5')).to.equal(undefined);
      expect(parseBytes('0.4 B')).to.equal(undefined);
    });
  });

  describe('Runtime#adopt', () => {
    it('refuses a pointer allocated by another runtime', async () => {
      await using a = await createRuntime();
      await using b = await createRuntime();
      const ptr: DataPtr = a.allocator().allocate(64);
      expect(() => b.adopt(ptr)).to.throw(/another runtime|did not allocate|foreign/i);
    });
  });
  describe('formatBytes', () => {
    it('carries into the next unit when rounding reaches 1024', () => {
      expect(formatBytes(2 ** 20 - 1)).to.equal('1.00 MiB');
    });
  });

  describe('AllocatorRegistry#get', () => {
    it('disposes the allocator its factory made when a decorator throws', async () => {
      let made: Allocator | undefined;
      await using rt = await createRuntime({
        plugins: [
          wrapAllocators('cpu', (a) => (made = a)),
          wrapAllocators('cpu', () => {
            throw new Error('wrap failed');
          }),
        ],
      });
      expect(() => rt.allocator('cpu')).to.throw(/wrap failed/);
      expect(() => made!.allocate(8), 'the factory-made allocator leaks').to.throw(DisposedError);
    });
  });
});
