import { closeSync } from 'node:fs';

import { pidfdGetfd, pidfdOpen } from './pidfd.js';

/** Closes each descriptor, ignoring those already closed. */
export function closeFds(fds: readonly number[]): void {
  for (const fd of fds) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
}

/**
 * Duplicates file descriptors `fds` of process `pid` into this one (`pidfd_open` + `pidfd_getfd`).
 * @throws SharedMemoryError (ESRCH: the producer is gone; EPERM: no ptrace access to it; EBADF: it closed them)
 */
export function takeFds(pid: number, fds: readonly number[]): number[] {
  const pidfd = pidfdOpen(pid);
  const taken: number[] = [];
  try {
    for (const fd of fds) taken.push(pidfdGetfd(pidfd, fd));
    return taken;
  } catch (error) {
    closeFds(taken);
    throw error;
  } finally {
    closeSync(pidfd);
  }
}
