import { fstatSync } from 'node:fs';

import { DisposedError, InvalidArgumentError } from '@stowage/core';
import { checkOptions } from '@stowage/core/plugin-kit';

import type { Libc } from './Libc.js';
import { check, libc, MAP_FAILED, MAP_SHARED, O_CREAT, O_EXCL, O_RDWR, PROT_READ, PROT_WRITE } from './Libc.js';
import { isSharedMemoryError, SharedMemoryError } from './SharedMemoryError.js';

/** Options of {@link SharedMemoryFile.create}. */
export interface CreateSharedMemoryOptions {
  /** The object's name, `/` then 1–200 of `[A-Za-z0-9._-]`. Default: `/stowage-ipc-<pid>-<serial>`. */
  readonly name?: string;
}

/** What a shared-memory name must look like (one path component under /dev/shm, portable characters only). */
export const SHARED_MEMORY_NAME = /^\/[A-Za-z0-9._-]{1,200}$/;

const MODE_OWNER_READ_WRITE = 0o600;

function expectName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || !SHARED_MEMORY_NAME.test(name)) {
    throw new InvalidArgumentError('name', name, "a shared-memory name: '/' then 1 to 200 of A-Z a-z 0-9 . _ -");
  }
}

/**
 * A POSIX shared-memory object (`shm_open` + `mmap(MAP_SHARED)`), mapped whole into this process. Another process
 * that opens the same name maps the same pages: a write through one {@link buffer} is read through the other's,
 * without a copy.
 *
 * Lifetimes: the name lives until {@link unlink} (by any process); the pages live until the name is unlinked and
 * every mapping is closed. {@link close} unmaps this process's mapping.
 *
 * Views: {@link buffer} is an ArrayBuffer over the mapping itself. A view (typed array, DataView) made from it must
 * not be used after {@link close}: the memory is unmapped and an access through a stale view crashes the process
 * (the ArrayBuffer is external and cannot be detached). This class checks its own members and throws DisposedError
 * after close; it cannot check views the caller kept.
 *
 * Invariants: mapped ⇔ not closed; byteLength == the object's size when it was mapped.
 */
export class SharedMemoryFile implements Disposable {
  static #serial = 0;
  readonly #libc: Libc;
  #fd: number;
  #address: bigint;
  #buffer: ArrayBuffer | undefined;
  #unlinked = false;

  private constructor(
    c: Libc,
    /** The object's name, as given to `shm_open`. */
    readonly name: string,
    fd: number,
    /** The mapping's size in bytes. */
    readonly byteLength: number,
    /**
     * The object's inode number: what tells this object from a later one that took its name after an unlink (an
     * inode that is still mapped is not reused).
     */
    readonly inode: number,
  ) {
    this.#libc = c;
    this.#fd = fd;
    this.#address = 0n;
    try {
      if (byteLength > 0) {
        const address = c.mmap(byteLength, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (address === MAP_FAILED) check(c, -1, 'mmap', `${name}, ${byteLength} bytes`, 'the system may be out of address space or memory');
        this.#address = address;
        this.#buffer = c.view(address, byteLength);
      } else {
        this.#buffer = new ArrayBuffer(0);
      }
    } catch (error) {
      c.close(fd);
      throw error;
    }
  }

  /**
   * Creates a new object of `byteLength` bytes (zero-filled), readable and writable by this user only (mode 0600),
   * and maps it. Fails with SharedMemoryError EEXIST when `options.name` already exists (O_EXCL); with a default
   * name, a leftover of a dead process that had this pid is skipped by taking the next serial.
   * @throws InvalidArgumentError for a bad size or name, or options that are not an options object (or have a key
   *   other than `name`); SharedMemoryError (ENOSPC, EMFILE, EACCES, …) from the system.
   */
  static create(byteLength: number, options: CreateSharedMemoryOptions = {}): SharedMemoryFile {
    if (!Number.isSafeInteger(byteLength) || byteLength < 0) throw new InvalidArgumentError('byteLength', byteLength, 'an integer ≥ 0');
    checkOptions<CreateSharedMemoryOptions>('options', options, ['name']);
    if (options.name !== undefined) expectName(options.name);
    const c = libc();
    for (;;) {
      const name = options.name ?? `/stowage-ipc-${process.pid}-${SharedMemoryFile.#serial++}`;
      const fd = c.shmOpen(name, O_RDWR | O_CREAT | O_EXCL, MODE_OWNER_READ_WRITE);
      if (fd === -1 && options.name === undefined && c.errnoName(c.errno()) === 'EEXIST') continue;
      check(c, fd, 'shm_open', name, options.name === undefined ? '' : 'the name is taken (O_EXCL); choose another or unlink the old object');
      if (c.ftruncate(fd, byteLength) === -1) {
        const errno = c.errno();
        c.close(fd);
        c.shmUnlink(name);
        throw new SharedMemoryError({ call: 'ftruncate', errno, errnoName: c.errnoName(errno), target: `${name}, ${byteLength}`, hint: '/dev/shm may be full (df /dev/shm)' });
      }
      try {
        return new SharedMemoryFile(c, name, fd, byteLength, fstatSync(fd).ino);
      } catch (error) {
        c.shmUnlink(name);
        throw error;
      }
    }
  }

  /**
   * Opens and maps the existing object `name`, whole (its size is read with fstat).
   * @throws InvalidArgumentError for a bad name; SharedMemoryError ENOENT when no object has this name (never
   *   created, or already unlinked), EACCES when another user owns it.
   */
  static open(name: string): SharedMemoryFile {
    expectName(name);
    const c = libc();
    const fd = check(c, c.shmOpen(name, O_RDWR, 0), 'shm_open', name, 'no shared-memory object of this name exists (never created, or already unlinked)');
    let stat: { size: number; ino: number };
    try {
      stat = fstatSync(fd);
    } catch (cause) {
      c.close(fd);
      throw cause;
    }
    return new SharedMemoryFile(c, name, fd, stat.size, stat.ino);
  }

  /**
   * Removes `name` from the system: later opens fail with ENOENT, and the pages are freed once every mapping is
   * closed. Returns true when this call removed it, false when it was already gone.
   * @throws InvalidArgumentError for a bad name; SharedMemoryError for another failure (EACCES).
   */
  static unlink(name: string): boolean {
    expectName(name);
    const c = libc();
    if (c.shmUnlink(name) === 0) return true;
    if (c.errnoName(c.errno()) === 'ENOENT') return false;
    check(c, -1, 'shm_unlink', name);
    return false;
  }

  /** The mapping (not a copy). See the class comment on views. @throws DisposedError after {@link close}. */
  get buffer(): ArrayBuffer {
    if (this.#buffer === undefined) throw this.#closedError('buffer');
    return this.#buffer;
  }

  /** The open file descriptor (owned by this object; do not close it). @throws DisposedError after {@link close}. */
  get fd(): number {
    if (this.#buffer === undefined) throw this.#closedError('fd');
    return this.#fd;
  }

  /** True once {@link close} has run. */
  get closed(): boolean {
    return this.#buffer === undefined;
  }

  /**
   * Unlinks this object's name (see the static {@link SharedMemoryFile.unlink}); allowed before or after close.
   * Returns true when this call removed the name; false when this object or another process already did.
   */
  unlink(): boolean {
    if (this.#unlinked) return false;
    this.#unlinked = true;
    try {
      return SharedMemoryFile.unlink(this.name);
    } catch (error) {
      if (!isSharedMemoryError(error, 'ENOENT')) this.#unlinked = false;
      throw error;
    }
  }

  /** Unmaps and closes the descriptor. Idempotent. The name stays until {@link unlink}. */
  close(): void {
    if (this.#buffer === undefined) return;
    this.#buffer = undefined;
    if (this.byteLength > 0) this.#libc.munmap(this.#address, this.byteLength);
    this.#libc.close(this.#fd);
    this.#fd = -1;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  #closedError(member: string): DisposedError {
    return new DisposedError(`SharedMemoryFile ${this.name} was used (${member}) after close(); open it again to map it.`);
  }
}
