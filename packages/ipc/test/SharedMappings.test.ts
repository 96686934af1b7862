import { expect } from 'chai';

import { InvalidArgumentError } from '@stowage/core';
import { SharedMappings, SharedMemoryFile } from '@stowage/ipc/testing';

import { shmObjects } from './childProcess.js';

const objectOf = (f: SharedMemoryFile): { name: string; inode: number } => ({ name: f.name, inode: f.inode });

describe('SharedMappings', () => {
  const files: SharedMemoryFile[] = [];
  const create = (bytes: number, name?: string): SharedMemoryFile => {
    const f = SharedMemoryFile.create(bytes, name === undefined ? {} : { name });
    files.push(f);
    return f;
  };
  afterEach(() => {
    for (const f of files.splice(0)) {
      f.unlink();
      f.close();
    }
  });
  after(() => {
    expect(shmObjects(), 'shared-memory objects left by these tests').to.deep.equal([]);
  });

  it('maps an object once for all the storages in it, and keeps the mapping for the next one after the last release', () => {
    const f = create(4096);
    const m = new SharedMappings();
    const a = m.map(objectOf(f), 1024);
    const b = m.map(objectOf(f), 4096);
    expect(b).to.equal(a);
    expect(m.uses(objectOf(f))).to.equal(2);
    new Uint8Array(f.buffer)[7] = 42;
    expect(new Uint8Array(a)[7], 'the same pages as the producer').to.equal(42);
    m.unmap(objectOf(f));
    m.unmap(objectOf(f));
    expect(m.uses(objectOf(f))).to.equal(0);
    expect(m.idleCount).to.equal(1);
    expect(m.map(objectOf(f), 16), 'the idle mapping, not a new one').to.equal(a);
    expect(m.idleCount).to.equal(0);
    m.unmap(objectOf(f));
    m.closeAll();
    expect(m.idleCount).to.equal(0);
  });

  it('refuses a name whose object is another one than the descriptor says (freed, and the name taken again) with InvalidArgumentError', () => {
    const first = create(64, `/stowage-test-mappings-${process.pid}`);
    const m = new SharedMappings();
    const old = m.map(objectOf(first), 64);
    first.unlink();
    const second = create(128, first.name);
    expect(second.inode).to.not.equal(first.inode);
    expect(m.map(objectOf(first), 64), 'a storage of the first object still maps the first object').to.equal(old);
    const fresh = m.map(objectOf(second), 128);
    expect(fresh).to.not.equal(old);
    expect(fresh.byteLength).to.equal(128);
    expect(() => m.map({ name: first.name, inode: second.inode + first.inode + 1 }, 8)).to.throw(InvalidArgumentError, /was freed, and its name now belongs to another/);
    expect(m.uses(objectOf(second))).to.equal(1);
    expect(m.uses(objectOf(first)), 'the older object, still in use').to.equal(2);
    m.unmap(objectOf(first));
    m.unmap(objectOf(first));
    expect(m.uses(objectOf(first))).to.equal(0);
    expect(m.idleCount, 'an older object is not kept idle: no descriptor can name it again').to.equal(0);
    expect(m.uses(objectOf(second))).to.equal(1);
    m.closeAll();
  });

  it('refuses a range past the end of the object, and keeps the mapping unused', () => {
    const f = create(64);
    const m = new SharedMappings();
    expect(() => m.map(objectOf(f), 65)).to.throw(InvalidArgumentError, /inside the shared-memory object/);
    expect(m.uses(objectOf(f))).to.equal(0);
    expect(m.idleCount).to.equal(1);
    m.closeAll();
  });

  it('keeps at most idleMappings unused mappings, closes them after idleMs, and at once on closeIdle()', async () => {
    const objects = [create(64), create(64), create(64)].map(objectOf);
    const m = new SharedMappings({ idleMappings: 2, idleMs: 20 });
    for (const o of objects) m.map(o, 64);
    for (const o of objects) m.unmap(o);
    expect(m.idleCount, 'the oldest was closed').to.equal(2);
    await new Promise((r) => setTimeout(r, 80));
    expect(m.idleCount, 'closed by the sweep').to.equal(0);
    m.map(objects[0]!, 64);
    m.unmap(objects[0]!);
    expect(m.idleCount).to.equal(1);
    m.closeIdle();
    expect(m.idleCount).to.equal(0);
    m.closeAll();
  });
});
