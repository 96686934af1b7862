import { InvalidArgumentError } from '@stowage/core';

import { SharedMemoryFile } from '../shm/SharedMemoryFile.js';

/**
 * The shared-memory objects a consumer mapped for its received storages, each mapped once and counted by the live
 * received storages that use it; unmapped when the last one is released.
 *
 * Invariants: every entry has refs ≥ 1 between calls; a closed file is never in the map.
 */
export class SharedMappings {
  readonly #mappings = new Map<string, { file: SharedMemoryFile; refs: number }>();

  /**
   * Maps the shared-memory object `name` (or takes one more use of its mapping) and checks that `endBytes` fit.
   * @throws SharedMemoryError (ENOENT: the producer freed or never made it); InvalidArgumentError when too small
   */
  map(name: string, endBytes: number): ArrayBuffer {
    let m = this.#mappings.get(name);
    if (m === undefined) {
      m = { file: SharedMemoryFile.open(name), refs: 0 };
      this.#mappings.set(name, m);
    }
    if (endBytes > m.file.byteLength) {
      if (m.refs === 0) {
        this.#mappings.delete(name);
        m.file.close();
      }
      throw new InvalidArgumentError('descriptor.byteLength', endBytes, `a range inside the shared-memory object ${name} (${m.file.byteLength} bytes)`);
    }
    m.refs++;
    return m.file.buffer;
  }

  /** One use of the mapping of `name` less; unmapped when none is left. */
  unmap(name: string): void {
    const m = this.#mappings.get(name);
    if (m === undefined) return;
    if (--m.refs > 0) return;
    this.#mappings.delete(name);
    m.file.close();
  }

  /** How many live received storages use the mapping of `name` (0: not mapped). */
  uses(name: string): number {
    return this.#mappings.get(name)?.refs ?? 0;
  }

  /** Unmaps everything (the runtime is disposed). */
  closeAll(): void {
    for (const { file } of this.#mappings.values()) file.close();
    this.#mappings.clear();
  }
}
