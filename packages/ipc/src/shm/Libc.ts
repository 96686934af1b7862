import { BackendUnavailableError } from '@stowage/core';
import type { LibraryHandle } from 'koffi';
import koffi from 'koffi';

import { SharedMemoryError } from './SharedMemoryError.js';

/**
 * The libc entry points the IPC layers call, bound through koffi. Every function returns the C result as is
 * (`-1` on failure, with the reason in {@link Libc.errno}); {@link check} turns a failure into a typed error.
 */
export interface Libc {
  shmOpen(name: string, flags: number, mode: number): number;
  shmUnlink(name: string): number;
  ftruncate(fd: number, byteLength: number): number;
  /** The mapping's address, `MAP_FAILED` (all ones) on failure. */
  mmap(byteLength: number, prot: number, flags: number, fd: number, offset: number): bigint;
  munmap(address: bigint, byteLength: number): number;
  close(fd: number): number;
  getpid(): number;
  kill(pid: number, signal: number): number;
  pidfdOpen(pid: number): number;
  pidfdGetfd(pidfd: number, targetFd: number): number;
  /** errno as the last call through koffi left it. */
  errno(): number;
  /** The symbolic name of an errno value (`ENOENT`), or `errno <n>` for one koffi does not name. */
  errnoName(errno: number): string;
  /** A view of `byteLength` bytes at `address`, without copying. */
  view(address: bigint, byteLength: number): ArrayBuffer;
}

// Linux values (asm-generic and x86 agree on these).
export const O_RDWR = 0o2;
export const O_CREAT = 0o100;
export const O_EXCL = 0o200;
export const PROT_READ = 0x1;
export const PROT_WRITE = 0x2;
export const MAP_SHARED = 0x1;
export const MAP_FAILED = 0xffff_ffff_ffff_ffffn;

/** `pidfd_open` and `pidfd_getfd`: the same numbers on x86_64 and aarch64 (the generic syscall table). */
const SYS_PIDFD_OPEN = 434;
const SYS_PIDFD_GETFD = 438;

// Note [One libc binding per process]
// dlopen returns the same handle for every load of libc.so.6 in a process, so the binding is made once, on first
// use, and kept in `cached`: the one piece of module state in this package. It is never reassigned after it is
// set, and nothing is loaded at import time (the package stays side-effect free and importable where there is no
// libc, e.g. macOS or a browser bundle, failing only when used).
let cached: Libc | undefined;

/** The process's libc binding; throws BackendUnavailableError where libc.so.6 cannot be loaded (not Linux). */
export function libc(): Libc {
  return (cached ??= bindLibc());
}

function bindLibc(): Libc {
  if (process.platform !== 'linux' || (process.arch !== 'x64' && process.arch !== 'arm64')) {
    throw new BackendUnavailableError(
      `POSIX shared memory for @stowage/ipc needs Linux on x86_64 or aarch64; this is ${process.platform} on ${process.arch}.`,
    );
  }
  let lib: LibraryHandle;
  try {
    lib = koffi.load('libc.so.6');
  } catch (cause) {
    throw new BackendUnavailableError('Could not load libc.so.6 for POSIX shared memory; is this a glibc-based Linux?', { cause });
  }
  const shmOpen = lib.func('int shm_open(const char *name, int oflag, uint32_t mode)');
  const shmUnlink = lib.func('int shm_unlink(const char *name)');
  const ftruncate = lib.func('int ftruncate(int fd, int64_t length)');
  const mmap = lib.func('void *mmap(void *addr, size_t length, int prot, int flags, int fd, int64_t offset)');
  const munmap = lib.func('int munmap(void *addr, size_t length)');
  const close = lib.func('int close(int fd)');
  const getpid = lib.func('int getpid()');
  const kill = lib.func('int kill(int pid, int sig)');
  const syscall = lib.func('long syscall(long number, ...)');
  const names = new Map<number, string>();
  for (const [name, value] of Object.entries(koffi.os.errno)) if (!names.has(value)) names.set(value, name);
  return {
    shmOpen: (name, flags, mode) => shmOpen(name, flags, mode) as number,
    shmUnlink: (name) => shmUnlink(name) as number,
    ftruncate: (fd, byteLength) => ftruncate(fd, byteLength) as number,
    mmap: (byteLength, prot, flags, fd, offset) => koffi.address(mmap(null, byteLength, prot, flags, fd, offset)),
    munmap: (address, byteLength) => munmap(address, byteLength) as number,
    close: (fd) => close(fd) as number,
    getpid: () => getpid() as number,
    kill: (pid, signal) => kill(pid, signal) as number,
    pidfdOpen: (pid) => Number(syscall(SYS_PIDFD_OPEN, 'int', pid, 'unsigned int', 0)),
    pidfdGetfd: (pidfd, targetFd) => Number(syscall(SYS_PIDFD_GETFD, 'int', pidfd, 'int', targetFd, 'unsigned int', 0)),
    errno: () => koffi.errno(),
    errnoName: (errno) => names.get(errno) ?? `errno ${errno}`,
    view: (address, byteLength) => koffi.view(address, byteLength),
  };
}

/**
 * Returns `result` when it is not -1; otherwise throws a {@link SharedMemoryError} for `call` with errno's name and
 * `hint` (what to do about it), read from errno right after the call.
 */
export function check(c: Libc, result: number, call: string, target: string, hint = ''): number {
  if (result !== -1) return result;
  const errno = c.errno();
  throw new SharedMemoryError({ call, errno, errnoName: c.errnoName(errno), target, hint });
}
