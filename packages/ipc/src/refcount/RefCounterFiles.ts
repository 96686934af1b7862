import { randomFillSync } from 'node:crypto';

import { DisposedError, ForeignPointerError, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import { checkOptions } from '@stowage/core/plugin-kit';

import { isProcessAlive } from '../shm/isProcessAlive.js';
import { SharedMemoryFile } from '../shm/SharedMemoryFile.js';
import type { CounterSlot } from './CounterSlot.js';
import type { CounterViews } from './RefCounterLayout.js';
import {
  counterViews,
  FLAG_CLOSED,
  fileBytes,
  H_FLAGS,
  H_HEADER_BYTES,
  H_MAGIC,
  H_NEXT_SLOT,
  H_PRODUCER_PID,
  H_SLOT_BYTES,
  H_SLOT_COUNT,
  H_SLOTS_DONE,
  H_VERSION,
  HEADER_BYTES,
  holderPid,
  holderThreadId,
  MAGIC,
  S32_PRODUCER,
  S32_STATE,
  S_COUNT,
  S_HELD,
  S_HOLDER,
  S_NONCE,
  SLOT_BYTES,
  slotBigIndex,
  slotIntIndex,
  STATE_DONE,
  STATE_LIVE,
  VERSION,
} from './RefCounterLayout.js';

/** Options of {@link RefCounterFiles}. */
export interface RefCounterFilesOptions {
  /** Counters per file (each 64 bytes; the default file is 256 KiB + 64 bytes). Default 4096. */
  readonly slotsPerFile?: number;
}

interface ProducerFile {
  readonly file: SharedMemoryFile;
  readonly views: CounterViews;
  /** Nonces for the file's slots, drawn at creation (one randomFillSync per file, not per slot). */
  readonly nonces: BigInt64Array;
}

const MAX_SLOTS_PER_FILE = 1 << 20;

/**
 * The producer's reference counters (one instance per process). Each send of a storage names a counter slot; the
 * consumer's release decrements it; the producer frees the storage once its count is 0. Counters live in
 * shared-memory files, laid out as Note [Ref-counter file layout] says.
 *
 * - `allocate()` hands out the current file's next slot (indices increase and are never reused); when the file is
 *   full, the next call creates a new file.
 * - `increment()` is a send; `done()` says the producer is finished with a slot whose count is 0.
 * - A file is unlinked (and unmapped here) when its last slot is done: it is full and every slot is done. Consumer
 *   mappings stay valid; the name is gone.
 * - `close()` unlinks every file at once and marks it closed in its header. A consumer that still holds slots
 *   keeps its mapping and may release into it (harmless: nobody reads it); a consumer that opens a file by name
 *   after the close gets SharedMemoryError ENOENT (a descriptor still in flight cannot be received). No file
 *   outlives the producer's `close()`; a producer that dies without it leaves its files to its consumers
 *   (RefCounterClient, Note [Orphaned counter files]).
 * - One slot has at most one holder (see {@link RefCounterClient}): give each consumer, in practice each send, its
 *   own slot. `reclaimDead()` subtracts what a dead holder acquired (the slot's `held`).
 *
 * Invariants, per live slot: 0 ≤ held ≤ count; count == increments − releases − reclaimed. Per file:
 * slotsDone ≤ nextSlot ≤ slotCount; a file is in {@link fileNames} ⇔ it is not closed and not (full and all done).
 */
export class RefCounterFiles implements Disposable {
  /** Counters per file. */
  readonly slotsPerFile: number;
  readonly #files = new Map<string, ProducerFile>();
  #current: ProducerFile | undefined;
  #closed = false;
  readonly #pid = process.pid;

  /** @throws InvalidArgumentError for options that are not an options object, an unknown key or a bad slotsPerFile */
  constructor(options: RefCounterFilesOptions = {}) {
    const slotsPerFile = checkOptions<RefCounterFilesOptions>('options', options, ['slotsPerFile']).slotsPerFile ?? 4096;
    if (!Number.isSafeInteger(slotsPerFile) || slotsPerFile < 1 || slotsPerFile > MAX_SLOTS_PER_FILE) {
      throw new InvalidArgumentError('slotsPerFile', slotsPerFile, `an integer from 1 to ${MAX_SLOTS_PER_FILE}`);
    }
    this.slotsPerFile = slotsPerFile;
  }

  /** Names of the files this producer has created and not yet unlinked, oldest first. */
  get fileNames(): readonly string[] {
    return [...this.#files.keys()];
  }

  /**
   * Hands out the next slot (count 0, state live, a fresh nonce), creating a file when there is none with room.
   * @throws DisposedError after close; SharedMemoryError when a new file cannot be created (/dev/shm full, EMFILE).
   */
  allocate(): CounterSlot {
    if (this.#closed) throw new DisposedError('RefCounterFiles.allocate() was called after close().');
    const f = (this.#current ??= this.#createFile());
    const { i32, i64 } = f.views;
    const slot = Atomics.load(i32, H_NEXT_SLOT);
    const nonce = f.nonces[slot]!;
    const b = slotBigIndex(slot);
    const w = slotIntIndex(slot);
    Atomics.store(i64, b + S_COUNT, 0n);
    Atomics.store(i64, b + S_HELD, 0n);
    Atomics.store(i64, b + S_HOLDER, 0n);
    Atomics.store(i32, w + S32_PRODUCER, this.#pid);
    Atomics.store(i64, b + S_NONCE, nonce);
    Atomics.store(i32, w + S32_STATE, STATE_LIVE);
    Atomics.store(i32, H_NEXT_SLOT, slot + 1);
    if (slot + 1 === this.slotsPerFile) this.#current = undefined;
    return { file: f.file.name, slot, nonce };
  }

  /**
   * A send: adds one reference to `slot` and returns the new count.
   * @throws ForeignPointerError for a slot this producer did not hand out (or a stale nonce); UseAfterReleaseError
   *   for a slot already done; InvalidArgumentError for a malformed one; DisposedError after close.
   */
  increment(slot: CounterSlot): number {
    const { f, b } = this.#live(slot, 'increment');
    return Number(Atomics.add(f.views.i64, b + S_COUNT, 1n) + 1n);
  }

  /** The slot's current count (references sent and not yet released or reclaimed). Throws as {@link increment}. */
  count(slot: CounterSlot): number {
    const { f, b } = this.#live(slot, 'count');
    return Number(Atomics.load(f.views.i64, b + S_COUNT));
  }

  /** The references of `slot` its holder acquired (received and not yet released). Throws as {@link increment}. */
  held(slot: CounterSlot): number {
    const { f, b } = this.#live(slot, 'held');
    return Number(Atomics.load(f.views.i64, b + S_HELD));
  }

  /**
   * The producer is finished with `slot`, whose count must be 0 (a storage still referenced waits in the limbo
   * instead). When this was the last slot of a full file, the file is unlinked and unmapped.
   * @throws InvalidArgumentError when the count is not 0 (nothing changed); as {@link increment} otherwise.
   */
  done(slot: CounterSlot): void {
    const { f, b, w } = this.#live(slot, 'done');
    const { i32, i64 } = f.views;
    const count = Atomics.load(i64, b + S_COUNT);
    if (count !== 0n) {
      throw new InvalidArgumentError('slot', slot, `a slot whose count is 0 (it is ${count}: consumers still hold it; keep the storage in the limbo until the count is 0)`);
    }
    Atomics.store(i32, w + S32_STATE, STATE_DONE);
    const slotsDone = Atomics.add(i32, H_SLOTS_DONE, 1) + 1;
    if (slotsDone === this.slotsPerFile) this.#retire(f);
  }

  /**
   * Reclaims the references of holders that no longer exist: for every live slot whose holder process is gone
   * (`kill(pid, 0)` fails with ESRCH), or whose holder is a thread of this process listed in `endedThreadIds`
   * (worker threadIds the caller knows have exited), subtracts the references the holder acquired and did not
   * release (the slot's `held`) and clears the holder. References sent but not yet acquired are not touched (no one
   * can tell whom they will reach); with the holder cleared, another consumer may acquire them. Returns the number
   * of references reclaimed.
   *
   * A pid can be reused: a holder whose pid now belongs to a new process looks alive and keeps its references
   * until that process exits too.
   */
  reclaimDead(endedThreadIds: ReadonlySet<number> = new Set()): number {
    if (this.#closed) return 0;
    const alive = new Map<number, boolean>();
    let reclaimed = 0n;
    for (const f of this.#files.values()) {
      const { i32, i64 } = f.views;
      const handedOut = Atomics.load(i32, H_NEXT_SLOT);
      for (let slot = 0; slot < handedOut; slot++) {
        const b = slotBigIndex(slot);
        if (Atomics.load(i32, slotIntIndex(slot) + S32_STATE) !== STATE_LIVE) continue;
        const holder = Atomics.load(i64, b + S_HOLDER);
        if (holder === 0n) continue;
        const pid = holderPid(holder);
        let dead: boolean;
        if (pid === this.#pid) {
          dead = endedThreadIds.has(holderThreadId(holder));
        } else {
          let isAlive = alive.get(pid);
          if (isAlive === undefined) alive.set(pid, (isAlive = isProcessAlive(pid)));
          dead = !isAlive;
        }
        if (!dead) continue;
        const held = Atomics.exchange(i64, b + S_HELD, 0n);
        Atomics.sub(i64, b + S_COUNT, held);
        Atomics.compareExchange(i64, b + S_HOLDER, holder, 0n);
        reclaimed += held;
      }
    }
    return Number(reclaimed);
  }

  /**
   * Unlinks and unmaps every file, whatever its slots' counts, and marks each closed in its header. Idempotent.
   * Counts are not consulted: the caller (the limbo) decides what to do with storages still referenced.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#current = undefined;
    for (const f of [...this.#files.values()]) this.#retire(f);
  }

  [Symbol.dispose](): void {
    this.close();
  }

  #createFile(): ProducerFile {
    const file = SharedMemoryFile.create(fileBytes(this.slotsPerFile));
    const views = counterViews(file.buffer);
    const nonces = new BigInt64Array(this.slotsPerFile);
    randomFillSync(nonces);
    for (let i = 0; i < nonces.length; i++) if (nonces[i] === 0n) nonces[i] = 1n;
    const { i32 } = views;
    Atomics.store(i32, H_VERSION, VERSION);
    Atomics.store(i32, H_HEADER_BYTES, HEADER_BYTES);
    Atomics.store(i32, H_SLOT_BYTES, SLOT_BYTES);
    Atomics.store(i32, H_SLOT_COUNT, this.slotsPerFile);
    Atomics.store(i32, H_PRODUCER_PID, this.#pid);
    Atomics.store(i32, H_MAGIC, MAGIC);
    const f: ProducerFile = { file, views, nonces };
    this.#files.set(file.name, f);
    return f;
  }

  #retire(f: ProducerFile): void {
    Atomics.or(f.views.i32, H_FLAGS, FLAG_CLOSED);
    this.#files.delete(f.file.name);
    if (this.#current === f) this.#current = undefined;
    f.file.unlink();
    f.file.close();
  }

  /** Validates `slot` as a live slot of one of this producer's files; nothing is changed when it throws. */
  #live(slot: CounterSlot, method: string): { f: ProducerFile; b: number; w: number } {
    if (this.#closed) throw new DisposedError(`RefCounterFiles.${method}() was called after close().`);
    expectCounterSlot(slot);
    const f = this.#files.get(slot.file);
    if (f === undefined) {
      throw new ForeignPointerError(`Counter slot ${describeSlot(slot)} is not in a live ref-counter file of this producer (pid ${this.#pid}); it was handed out by another producer, or its file was already unlinked.`);
    }
    const handedOut = Atomics.load(f.views.i32, H_NEXT_SLOT);
    if (slot.slot >= handedOut) throw new InvalidArgumentError('slot.slot', slot.slot, `a slot handed out in ${slot.file} (0 to ${handedOut - 1})`);
    const b = slotBigIndex(slot.slot);
    const w = slotIntIndex(slot.slot);
    if (Atomics.load(f.views.i64, b + S_NONCE) !== slot.nonce) {
      throw new ForeignPointerError(`Counter slot ${describeSlot(slot)} carries the wrong nonce: the descriptor is forged or stale.`);
    }
    if (Atomics.load(f.views.i32, w + S32_STATE) !== STATE_LIVE) {
      throw new UseAfterReleaseError(`Counter slot ${describeSlot(slot)} was used (${method}) after done().`);
    }
    return { f, b, w };
  }
}

/** Checks the shape of a descriptor's counter slot (types and ranges that need no file). */
export function expectCounterSlot(slot: CounterSlot): void {
  if (typeof slot !== 'object' || slot === null) throw new InvalidArgumentError('slot', slot, 'a CounterSlot { file, slot, nonce }');
  if (typeof slot.file !== 'string') throw new InvalidArgumentError('slot.file', slot.file, 'a shared-memory name');
  if (!Number.isSafeInteger(slot.slot) || slot.slot < 0) throw new InvalidArgumentError('slot.slot', slot.slot, 'an integer ≥ 0');
  if (typeof slot.nonce !== 'bigint' || slot.nonce === 0n || BigInt.asIntN(64, slot.nonce) !== slot.nonce) {
    throw new InvalidArgumentError('slot.nonce', slot.nonce, 'a non-zero signed 64-bit bigint');
  }
}

export function describeSlot(slot: CounterSlot): string {
  return `${slot.file}#${slot.slot}`;
}
