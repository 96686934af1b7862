import { InvalidArgumentError } from '@stowage/core';

import { expectPid } from './isProcessAlive.js';
import { check, libc } from './Libc.js';

function expectFd(argument: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0 || value > 0x7fff_ffff) throw new InvalidArgumentError(argument, value, 'a file descriptor (an integer ≥ 0)');
}

/**
 * `pidfd_open(pid, 0)`: a file descriptor that refers to process `pid` (Linux ≥ 5.3). The caller owns it and
 * closes it (`fs.closeSync`). Throws SharedMemoryError (ESRCH when there is no such process, ENOSYS on an older
 * kernel).
 */
export function pidfdOpen(pid: number): number {
  expectPid(pid);
  const c = libc();
  return check(c, c.pidfdOpen(pid), 'pidfd_open', String(pid), 'the process must exist and the kernel be Linux 5.3 or later');
}

/**
 * `pidfd_getfd(pidfd, targetFd, 0)`: a duplicate, in this process, of file descriptor `targetFd` of the process
 * that `pidfd` refers to (Linux ≥ 5.6), as PyTorch takes an expandable segment's descriptors from its producer.
 * The caller owns the new descriptor. The kernel asks for ptrace access to the target (PTRACE_MODE_ATTACH_REALCREDS):
 * a parent may take its child's descriptors; other pairs may be refused with EPERM under Yama's ptrace_scope ≥ 1.
 * Throws SharedMemoryError (EBADF when `targetFd` is not open in the target).
 */
export function pidfdGetfd(pidfd: number, targetFd: number): number {
  expectFd('pidfd', pidfd);
  expectFd('targetFd', targetFd);
  const c = libc();
  return check(
    c,
    c.pidfdGetfd(pidfd, targetFd),
    'pidfd_getfd',
    `${pidfd}, ${targetFd}`,
    'the target must have the descriptor open, this process needs ptrace access to it (e.g. be its parent), and the kernel be Linux 5.6 or later',
  );
}
