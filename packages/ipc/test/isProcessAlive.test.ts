import { expect } from 'chai';
import { InvalidArgumentError } from '@stowage/core';
import { isProcessAlive } from '@stowage/ipc/testing';

import { Child } from './childProcess.js';

describe('isProcessAlive', function () {
  this.timeout(60_000);

  it('is true for this process and a running child, false once the child is killed and reaped', async () => {
    expect(isProcessAlive(process.pid)).to.equal(true);
    const child = new Child();
    await child.call({ op: 'pid' });
    expect(isProcessAlive(child.pid)).to.equal(true);
    await child.kill();
    expect(isProcessAlive(child.pid)).to.equal(false);
  });

  it('refuses a malformed pid with InvalidArgumentError', () => {
    for (const pid of [0, -1, 1.5, 2 ** 31]) expect(() => isProcessAlive(pid)).to.throw(InvalidArgumentError);
  });
});
