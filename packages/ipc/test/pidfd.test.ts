import { closeSync, mkdtempSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import { SharedMemoryError } from '@stowage/ipc';
import { pidfdGetfd, pidfdOpen } from '@stowage/ipc/testing';

import { Child } from './childProcess.js';

describe('pidfdOpen / pidfdGetfd', function () {
  this.timeout(60_000);

  it("takes a child's file descriptor and reads the same file through it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stowage-ipc-'));
    const child = new Child();
    try {
      writeFileSync(join(dir, 'f'), 'from the child');
      const { fd } = (await child.call({ op: 'openFile', path: join(dir, 'f') })) as unknown as { fd: number };
      const pidfd = pidfdOpen(child.pid);
      const mine = pidfdGetfd(pidfd, fd);
      const bytes = Buffer.alloc(64);
      const n = readSync(mine, bytes, 0, 64, 0);
      expect(bytes.subarray(0, n).toString()).to.equal('from the child');
      expect(() => pidfdGetfd(pidfd, 999)).to.throw(SharedMemoryError, /pidfd_getfd.*EBADF/);
      closeSync(mine);
      closeSync(pidfd);
    } finally {
      await child.exit();
      rmSync(dir, { recursive: true });
    }
  });

  it('refuses a process that does not exist with ESRCH', () => {
    expect(() => pidfdOpen(0x3fff_fff0)).to.throw(SharedMemoryError, /pidfd_open.*ESRCH/);
  });

  it('refuses malformed pids and descriptors with InvalidArgumentError', () => {
    expect(() => pidfdOpen(0)).to.throw(InvalidArgumentError);
    expect(() => pidfdOpen(1.5)).to.throw(InvalidArgumentError);
    expect(() => pidfdGetfd(-1, 3)).to.throw(InvalidArgumentError);
  });
});
