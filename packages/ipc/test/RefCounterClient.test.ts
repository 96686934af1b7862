import { expect } from 'chai';
import { DisposedError, DoubleFreeError, ForeignPointerError, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import type { CounterSlot } from '@stowage/ipc';
import { SharedMemoryError } from '@stowage/ipc';
import { RefCounterClient, RefCounterFiles, SharedMemoryFile } from '@stowage/ipc/testing';

import { shmObjects } from './childProcess.js';

describe('RefCounterClient', () => {
  let files: RefCounterFiles;
  let slot: CounterSlot;
  beforeEach(() => {
    files = new RefCounterFiles({ slotsPerFile: 8 });
    slot = files.allocate();
    files.increment(slot);
  });
  afterEach(() => {
    files.close();
  });
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  /** The slot can still be acquired and released by a fresh consumer: nothing was changed. */
  function expectUnchanged(): void {
    expect(files.count(slot)).to.equal(1);
    using other = new RefCounterClient({ threadId: 99 });
    other.acquire(slot);
    other.release(slot);
    expect(files.count(slot)).to.equal(0);
  }

  describe('RefCounterClient#acquire', () => {
    it('refuses a forged nonce with ForeignPointerError and changes nothing', () => {
      using client = new RefCounterClient();
      expect(() => client.acquire({ ...slot, nonce: slot.nonce ^ 1n })).to.throw(ForeignPointerError, /wrong nonce/);
      expectUnchanged();
    });

    it('refuses a slot beyond the file or not yet handed out with InvalidArgumentError and changes nothing', () => {
      using client = new RefCounterClient();
      expect(() => client.acquire({ ...slot, slot: 8 })).to.throw(InvalidArgumentError, /0 to 7/);
      expect(() => client.acquire({ ...slot, slot: 1 })).to.throw(InvalidArgumentError, /handed out .*0 to 0/);
      expect(() => client.acquire({ ...slot, slot: -1 })).to.throw(InvalidArgumentError);
      expect(() => client.acquire({ ...slot, slot: 0.5 })).to.throw(InvalidArgumentError);
      expect(() => client.acquire({ ...slot, nonce: 0n })).to.throw(InvalidArgumentError);
      expect(() => client.acquire({ ...slot, nonce: 2n ** 64n })).to.throw(InvalidArgumentError);
      expectUnchanged();
    });

    it('refuses a name that is not a counter file, or no file at all, with typed errors', () => {
      using client = new RefCounterClient();
      using plain = SharedMemoryFile.create(64 + 64 * 8);
      new Uint8Array(plain.buffer).fill(0xab);
      using tiny = SharedMemoryFile.create(16);
      try {
        expect(() => client.acquire({ ...slot, file: plain.name })).to.throw(InvalidArgumentError, /ref-counter file \(its magic number is wrong\)/);
        expect(() => client.acquire({ ...slot, file: tiny.name })).to.throw(InvalidArgumentError, /fewer than a header/);
        expect(() => client.acquire({ ...slot, file: '/stowage-ipc-gone' })).to.throw(SharedMemoryError, /ENOENT/);
        expect(() => client.acquire({ ...slot, file: 'not a name' })).to.throw(InvalidArgumentError);
        expect(client.mappedFiles).to.equal(0);
        expect(new Uint8Array(plain.buffer).every((b) => b === 0xab)).to.equal(true);
      } finally {
        plain.unlink();
        tiny.unlink();
      }
      expectUnchanged();
    });

    it('refuses a second holder with ForeignPointerError: one slot, one holder', () => {
      files.increment(slot);
      using a = new RefCounterClient({ threadId: 1 });
      using b = new RefCounterClient({ threadId: 2 });
      a.acquire(slot);
      expect(() => b.acquire(slot)).to.throw(ForeignPointerError, /held by thread 1 of process \d+/);
      a.acquire(slot);
      expect(files.count(slot)).to.equal(2);
    });

    it('refuses more acquisitions than sends (a descriptor received twice) and changes nothing', () => {
      using client = new RefCounterClient();
      client.acquire(slot);
      expect(() => client.acquire(slot)).to.throw(InvalidArgumentError, /received twice/);
      client.release(slot);
      expect(files.count(slot)).to.equal(0);
    });

    it('refuses a slot the producer is done with with UseAfterReleaseError', () => {
      using client = new RefCounterClient();
      const other = files.allocate();
      files.done(other);
      expect(() => client.acquire(other)).to.throw(UseAfterReleaseError);
    });
  });

  describe('RefCounterClient#release', () => {
    it('decrements the count and refuses to go below zero with DoubleFreeError, count unchanged', () => {
      using client = new RefCounterClient();
      client.acquire(slot);
      client.release(slot);
      expect(files.count(slot)).to.equal(0);
      expect(() => client.release(slot)).to.throw(DoubleFreeError, /count is unchanged/);
      expect(files.count(slot)).to.equal(0);
    });

    it('refuses a slot this consumer never acquired with DoubleFreeError and changes nothing', () => {
      using client = new RefCounterClient();
      expect(() => client.release(slot)).to.throw(DoubleFreeError);
      expectUnchanged();
    });

    it('refuses a forged nonce on a held slot with ForeignPointerError and changes nothing', () => {
      using client = new RefCounterClient();
      client.acquire(slot);
      expect(() => client.release({ ...slot, nonce: slot.nonce + 1n })).to.throw(ForeignPointerError);
      expect(files.count(slot)).to.equal(1);
      client.release(slot);
    });
  });

  describe('RefCounterClient#mappedFiles', () => {
    it('closes a file when no slot of it is held, beyond the idle files it keeps', () => {
      const other = new RefCounterFiles({ slotsPerFile: 8 });
      try {
        const s2 = other.allocate();
        other.increment(s2);
        using eager = new RefCounterClient({ idleFiles: 0, threadId: 5 });
        eager.acquire(slot);
        expect(eager.mappedFiles).to.equal(1);
        eager.release(slot);
        expect(eager.mappedFiles).to.equal(0);
        files.increment(slot);
        using keeping = new RefCounterClient({ idleFiles: 1, threadId: 5 });
        keeping.acquire(slot);
        keeping.acquire(s2);
        expect(keeping.mappedFiles).to.equal(2);
        keeping.release(slot);
        expect(keeping.mappedFiles).to.equal(2);
        keeping.release(s2);
        expect(keeping.mappedFiles).to.equal(1);
      } finally {
        other.close();
      }
    });
  });

  describe('new RefCounterClient', () => {
    it('refuses options that are not an options object, an unknown key or bad values with InvalidArgumentError', () => {
      for (const options of [null, 5, { threadID: 1 }, { threadId: -1 }, { idleFiles: 'all' }]) expect(() => new RefCounterClient(options as never), JSON.stringify(options)).to.throw(InvalidArgumentError);
    });
  });

  describe('RefCounterClient#producerGone', () => {
    it('refuses what is not a CounterSlot with InvalidArgumentError', () => {
      using client = new RefCounterClient();
      for (const bad of [undefined, null, { file: 5, slot: 0, nonce: 1n }]) expect(() => client.producerGone(bad as never), String(bad)).to.throw(InvalidArgumentError, /slot/);
      expect(client.producerGone(slot), 'a slot whose file is not mapped here').to.equal(false);
    });
  });

  describe('RefCounterClient#close', () => {
    it('releases the references still held, unmaps, and refuses later use', () => {
      files.increment(slot);
      const client = new RefCounterClient();
      client.acquire(slot);
      client.acquire(slot);
      expect(client.close()).to.equal(2);
      expect(client.close()).to.equal(0);
      expect(files.count(slot)).to.equal(0);
      expect(client.mappedFiles).to.equal(0);
      expect(() => client.acquire(slot)).to.throw(DisposedError);
      expect(() => client.release(slot)).to.throw(DisposedError);
    });
  });
});
