import { InvalidArgumentError } from '@stowage/core';

import { SharedMemoryFile } from '../shm/SharedMemoryFile.js';

/** Options of {@link SharedMappings}. */
export interface SharedMappingsOptions {
  /** How many unused mappings stay mapped for the next storage in the same object. Default 64. */
  readonly idleMappings?: number;
  /** How long an unused mapping stays mapped, in milliseconds (a sweep every `idleMs`: at most twice that). Default 1000. */
  readonly idleMs?: number;
}

/** A shared-memory object as a descriptor names it. */
export interface SharedObject {
  readonly name: string;
  readonly inode: number;
}

interface Mapping {
  readonly file: SharedMemoryFile;
  refs: number;
  /** When refs last fell to 0 (performance.now()). */
  idleSince: number;
}

/**
 * The shared-memory objects a consumer mapped for its received storages, each mapped once and counted by the live
 * received storages that use it.
 *
 * Note [Idle mappings]: a producer re-sends from the same few segments (its caching engine keeps them), so mapping
 * an object for each storage and unmapping it at the release cost most of a round trip: `shm_open`, `fstat`,
 * `mmap`, and above all the external ArrayBuffer over the mapping, whose size V8 counts towards its heap limit — a
 * 1 GiB segment made every receive start a garbage collection (22 ms a round trip at 1 GiB, against 0.1 ms at
 * 1 KiB). So a mapping whose last storage is released stays mapped, idle, for the next storage in the same object:
 * at most `idleMappings` of them, each for about `idleMs` (a sweep every `idleMs` closes those idle longer), and
 * none after a collection (`ipcCollect`). A mapping is known by the object's name and inode: a producer that freed a
 * segment unlinked its name, and a later object of that name (another process with a reused pid) has another
 * inode, since an inode still mapped here is not reused; so taking a mapping again costs no system call. An idle
 * mapping of an unlinked object holds its pages until it is closed: the memory a consumer keeps after the producer
 * freed it is bounded by `idleMappings` objects and `idleMs`.
 *
 * The mappings are found by name, and the inode compared (no key string made per storage); the rare older object
 * of a name still in use when a newer one arrives moves to `#displaced`, by name and inode.
 *
 * Invariants: every entry with refs == 0 is in `#idle` (in the order its refs fell to 0) and vice versa; a displaced
 * entry has refs ≥ 1 (closed when its last use goes); a closed file is in no map.
 */
export class SharedMappings {
  /** By name: the newest object of each name mapped here. */
  readonly #mappings = new Map<string, Mapping>();
  /** Older objects of a name, still used by live storages, by `name#inode`. */
  readonly #displaced = new Map<string, Mapping>();
  /** Unused mappings (in #mappings), by name, oldest first. */
  readonly #idle = new Map<string, Mapping>();
  readonly #idleMappings: number;
  readonly #idleMs: number;
  #timer: NodeJS.Timeout | undefined;

  constructor(options: SharedMappingsOptions = {}) {
    this.#idleMappings = options.idleMappings ?? 64;
    this.#idleMs = options.idleMs ?? 1000;
  }

  /**
   * Maps the shared-memory object (or takes one more use of its mapping) and checks that `endBytes` fit.
   * @throws SharedMemoryError (ENOENT: the producer freed or never made it); InvalidArgumentError when the object of
   *   that name is another one (the producer freed it and the name was taken again) or too small
   */
  map(object: SharedObject, endBytes: number): ArrayBuffer {
    const name = object.name;
    let m = this.#find(object);
    if (m === undefined) {
      const file = SharedMemoryFile.open(name);
      if (file.inode !== object.inode) {
        file.close();
        throw new InvalidArgumentError(
          'descriptor.memory.inode',
          object.inode,
          `the inode of the shared-memory object ${name} (${file.inode}): the object the producer sent was freed, and its name now belongs to another`,
        );
      }
      const older = this.#mappings.get(name);
      if (older !== undefined) {
        if (older.refs === 0) this.#close(name, older);
        else this.#displaced.set(keyOf(older.file), older);
      }
      m = { file, refs: 0, idleSince: 0 };
      this.#mappings.set(name, m);
    } else if (m.refs === 0) {
      this.#idle.delete(name);
    }
    if (endBytes > m.file.byteLength) {
      if (m.refs === 0) this.#becameIdle(name, m);
      throw new InvalidArgumentError('descriptor.byteLength', endBytes, `a range inside the shared-memory object ${name} (${m.file.byteLength} bytes)`);
    }
    m.refs++;
    return m.file.buffer;
  }

  /** One use of the mapping of `object` less; kept idle when none is left (Note [Idle mappings]). */
  unmap(object: SharedObject): void {
    const m = this.#find(object);
    if (m === undefined || m.refs === 0 || --m.refs > 0) return;
    if (this.#mappings.get(object.name) === m) {
      this.#becameIdle(object.name, m);
    } else {
      this.#displaced.delete(keyOf(object));
      m.file.close();
    }
  }

  /** How many live received storages use the mapping of `object` (0: none, mapped idle or not at all). */
  uses(object: SharedObject): number {
    return this.#find(object)?.refs ?? 0;
  }

  /** How many unused mappings are kept (Note [Idle mappings]). */
  get idleCount(): number {
    return this.#idle.size;
  }

  /** Unmaps every unused mapping now. */
  closeIdle(): void {
    this.#closeIdle(Infinity);
  }

  /** Unmaps everything (the runtime is disposed). */
  closeAll(): void {
    for (const { file } of this.#mappings.values()) file.close();
    for (const { file } of this.#displaced.values()) file.close();
    this.#mappings.clear();
    this.#displaced.clear();
    this.#idle.clear();
    this.#stopTimer();
  }

  /** The mapping of exactly this object (name and inode), if any. */
  #find(object: SharedObject): Mapping | undefined {
    const m = this.#mappings.get(object.name);
    if (m === undefined || m.file.inode === object.inode) return m;
    return this.#displaced.size === 0 ? undefined : this.#displaced.get(keyOf(object));
  }

  #becameIdle(name: string, m: Mapping): void {
    m.idleSince = performance.now();
    this.#idle.set(name, m);
    if (this.#idle.size > this.#idleMappings) {
      const [oldest, o] = this.#idle.entries().next().value!;
      this.#close(oldest, o);
    }
    if (this.#timer === undefined && this.#idle.size > 0) {
      this.#timer = setInterval(() => this.#closeIdle(performance.now() - this.#idleMs), this.#idleMs);
      this.#timer.unref();
    }
  }

  /** Unmaps the idle mappings that became idle before `before` (performance.now()). */
  #closeIdle(before: number): void {
    for (const [name, m] of this.#idle) {
      if (m.idleSince >= before) break;
      this.#close(name, m);
    }
    if (this.#idle.size === 0) this.#stopTimer();
  }

  #close(name: string, m: Mapping): void {
    this.#idle.delete(name);
    this.#mappings.delete(name);
    m.file.close();
  }

  #stopTimer(): void {
    if (this.#timer === undefined) return;
    clearInterval(this.#timer);
    this.#timer = undefined;
  }
}

const keyOf = (object: SharedObject): string => `${object.name}#${object.inode}`;
