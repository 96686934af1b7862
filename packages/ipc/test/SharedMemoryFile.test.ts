import { expect } from 'chai';
import { DisposedError, InvalidArgumentError } from '@stowage/core';
import { isSharedMemoryError, SharedMemoryError } from '@stowage/ipc';
import { SharedMemoryFile } from '@stowage/ipc/testing';

import { Barrier, Child, shmExists, shmObjects } from './childProcess.js';

describe('SharedMemoryFile', function () {
  this.timeout(60_000);
  let child: Child;
  before(() => {
    child = new Child();
  });
  after(async () => {
    await child.exit();
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  describe('SharedMemoryFile.create', () => {
    it('creates a zero-filled object under /dev/shm with a default name of this process', () => {
      using f = SharedMemoryFile.create(4096);
      expect(f.name).to.match(new RegExp(`^/stowage-ipc-${process.pid}-\\d+$`));
      expect(f.byteLength).to.equal(4096);
      expect(new Uint8Array(f.buffer).every((b) => b === 0)).to.equal(true);
      expect(shmExists(f.name)).to.equal(true);
      f.unlink();
    });

    it('shares writes with a child process both ways without copying', async () => {
      using f = SharedMemoryFile.create(1 << 20);
      const bytes = new Uint8Array(f.buffer);
      bytes.set([1, 2, 3, 4], 0);
      bytes[(1 << 20) - 1] = 9;
      const read = await child.call({ op: 'shmRead', name: f.name, length: 4 });
      expect(read['byteLength']).to.equal(1 << 20);
      expect(read['bytes']).to.deep.equal([1, 2, 3, 4]);
      await child.call({ op: 'shmWrite', name: f.name, offset: 2, bytes: [30, 40, 50] });
      expect([...bytes.subarray(0, 5)]).to.deep.equal([1, 2, 30, 40, 50]);
      f.unlink();
    });

    it('makes Atomics.add on the mapping atomic across processes (no lost updates)', async () => {
      using f = SharedMemoryFile.create(8);
      using barrier = new Barrier();
      const words = new BigInt64Array(f.buffer);
      const times = 2_000_000;
      const childDone = child.call({ op: 'shmAdd', name: f.name, barrier: barrier.name, times });
      barrier.release();
      for (let i = times; i > 0; i--) Atomics.add(words, 0, 1n);
      await childDone;
      expect(Atomics.load(words, 0)).to.equal(BigInt(2 * times));
      f.unlink();
    });

    it('refuses a taken name with EEXIST', () => {
      using a = SharedMemoryFile.create(64);
      expect(() => SharedMemoryFile.create(64, { name: a.name }))
        .to.throw(SharedMemoryError, /shm_open.*EEXIST/)
        .with.property('code', 'DEVICE_ERROR');
      a.unlink();
    });

    it('refuses bad names and sizes with InvalidArgumentError', () => {
      for (const name of ['', 'no-slash', '/', '/a/b', '/sp ace', `/${'x'.repeat(201)}`, '/ünï']) {
        expect(() => SharedMemoryFile.create(64, { name }), name).to.throw(InvalidArgumentError, /name must be a shared-memory name/);
      }
      for (const size of [-1, 1.5, Number.NaN, 2 ** 60]) expect(() => SharedMemoryFile.create(size)).to.throw(InvalidArgumentError);
      for (const options of [null, 5, { nme: '/x' }]) expect(() => SharedMemoryFile.create(64, options as never), String(options)).to.throw(InvalidArgumentError, /options/);
      expect(shmObjects()).to.deep.equal([]);
    });
  });

  describe('SharedMemoryFile.open', () => {
    it('maps an existing object whole, with its size', () => {
      using a = SharedMemoryFile.create(12_345);
      new Uint8Array(a.buffer)[12_344] = 7;
      using b = SharedMemoryFile.open(a.name);
      expect(b.byteLength).to.equal(12_345);
      expect(new Uint8Array(b.buffer)[12_344]).to.equal(7);
      a.unlink();
    });

    it('throws a typed ENOENT error for a missing name', () => {
      const open = (): SharedMemoryFile => SharedMemoryFile.open('/stowage-ipc-no-such-object');
      expect(open).to.throw(SharedMemoryError, /shm_open\(\/stowage-ipc-no-such-object\) failed with ENOENT.*never created, or already unlinked/);
      try {
        open();
      } catch (error) {
        expect(isSharedMemoryError(error, 'ENOENT')).to.equal(true);
        expect((error as SharedMemoryError).errno).to.be.a('number');
      }
    });

    it('refuses a bad name with InvalidArgumentError', () => {
      expect(() => SharedMemoryFile.open('../etc/passwd')).to.throw(InvalidArgumentError);
    });
  });

  describe('SharedMemoryFile#unlink', () => {
    it('removes /dev/shm/<name> while the mapping stays usable', () => {
      using f = SharedMemoryFile.create(64);
      expect(f.unlink()).to.equal(true);
      expect(shmExists(f.name)).to.equal(false);
      new Uint8Array(f.buffer)[0] = 1;
      expect(f.unlink()).to.equal(false);
      expect(SharedMemoryFile.unlink(f.name)).to.equal(false);
      expect(() => SharedMemoryFile.open(f.name)).to.throw(SharedMemoryError, /ENOENT/);
    });
  });

  describe('SharedMemoryFile#close', () => {
    it('is idempotent and turns later use into DisposedError', () => {
      const f = SharedMemoryFile.create(64);
      f.close();
      f.close();
      expect(f.closed).to.equal(true);
      expect(() => f.buffer).to.throw(DisposedError, /after close/);
      expect(() => f.fd).to.throw(DisposedError);
      expect(f.unlink()).to.equal(true);
    });
  });
});
