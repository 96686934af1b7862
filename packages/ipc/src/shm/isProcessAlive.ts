import { InvalidArgumentError } from '@stowage/core';

import { check, libc } from './Libc.js';

/** Refuses anything but a positive 31-bit integer as a pid. */
export function expectPid(value: number): void {
  if (!Number.isSafeInteger(value) || value <= 0 || value > 0x7fff_ffff) throw new InvalidArgumentError('pid', value, 'a process id (an integer ≥ 1)');
}

/**
 * True when process `pid` exists (`kill(pid, 0)` succeeds or fails with EPERM: it exists but belongs to another
 * user); false when the kernel says ESRCH. A zombie (exited, not yet reaped by its parent) still exists. Pids are
 * reused, so "alive" means "some process has this pid". This process's own pid is alive without a system call.
 */
export function isProcessAlive(pid: number): boolean {
  expectPid(pid);
  if (pid === process.pid) return true;
  const c = libc();
  if (c.kill(pid, 0) === 0) return true;
  const errno = c.errno();
  const name = c.errnoName(errno);
  if (name === 'ESRCH') return false;
  if (name === 'EPERM') return true;
  check(c, -1, 'kill', `${pid}, 0`);
  return true;
}
