import { threadId as currentThreadId } from 'node:worker_threads';

import { DisposedError, DoubleFreeError, ForeignPointerError, InvalidArgumentError, UseAfterReleaseError } from '@stowage/core';
import { checkOptions } from '@stowage/core/plugin-kit';

import { isProcessAlive } from '../shm/isProcessAlive.js';
import { SharedMemoryFile } from '../shm/SharedMemoryFile.js';
import type { CounterSlot } from './CounterSlot.js';
import { describeSlot, expectCounterSlot } from './RefCounterFiles.js';
import type { CounterViews } from './RefCounterLayout.js';
import {
  anyInFlight,
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
  H_VERSION,
  HEADER_BYTES,
  holderPid,
  holderThreadId,
  holderWord,
  MAGIC,
  S32_STATE,
  S_COUNT,
  S_HELD,
  S_HOLDER,
  S_NONCE,
  SLOT_BYTES,
  slotBigIndex,
  slotIntIndex,
  STATE_LIVE,
  VERSION,
} from './RefCounterLayout.js';

/** Options of {@link RefCounterClient}. */
export interface RefCounterClientOptions {
  /**
   * The holder's thread id recorded in acquired slots. Default: this thread's `worker_threads.threadId` (0 on the
   * main thread). Override only to act for another thread of this process (tests do, to stand for a worker).
   */
  readonly threadId?: number;
  /**
   * Files kept mapped after this client's last reference in them is released, most recent first, so that a stream
   * of slots from one producer file does not map and unmap it for every storage. 0 closes a file as soon as no
   * slot of it is held. Default 1.
   */
  readonly idleFiles?: number;
}

interface ClientFile {
  readonly file: SharedMemoryFile;
  readonly views: CounterViews;
  readonly slotCount: number;
  /** References this client holds in the file, per slot index (with the slot's nonce, for close()). */
  readonly holds: Map<number, { nonce: bigint; refs: number }>;
}

/**
 * The consumer's side of the counters: opens producers' ref-counter files by name (caching the mappings),
 * records itself as a slot's holder on receipt and decrements the count on release.
 *
 * One slot, one holder: the first `acquire()` of a slot records this process's pid and this thread's id in it;
 * an acquire from any other thread or process is refused while that holder is recorded (the producer gives each
 * consumer, in practice each send, its own slot). That is what lets the producer's `reclaimDead()` know exactly how
 * many references a dead consumer took: the slot's `held`.
 *
 * Invariants: for every mapped file, Σ holds.refs == the references this client acquired there and has not
 * released; a file is mapped ⇔ it has holds, or it is in the idle list; |idle list| ≤ idleFiles.
 */
export class RefCounterClient implements Disposable {
  /** The holder identity this client records: this process's pid and {@link RefCounterClientOptions.threadId}. */
  readonly pid = process.pid;
  readonly threadId: number;
  readonly #holder: bigint;
  readonly #idleLimit: number;
  readonly #files = new Map<string, ClientFile>();
  /** Mapped files with no holds, least recently emptied first. */
  readonly #idle = new Set<string>();
  #closed = false;

  /** @throws InvalidArgumentError for options that are not an options object, an unknown key or a bad value */
  constructor(options: RefCounterClientOptions = {}) {
    const checked = checkOptions<RefCounterClientOptions>('options', options, ['threadId', 'idleFiles']);
    const threadId = checked.threadId ?? currentThreadId;
    if (!Number.isSafeInteger(threadId) || threadId < 0 || threadId > 0xffff_ffff) throw new InvalidArgumentError('threadId', threadId, 'an integer from 0 to 2^32 - 1');
    const idleFiles = checked.idleFiles ?? 1;
    if (!Number.isSafeInteger(idleFiles) || idleFiles < 0) throw new InvalidArgumentError('idleFiles', idleFiles, 'an integer ≥ 0');
    this.threadId = threadId;
    this.#holder = holderWord(this.pid, threadId);
    this.#idleLimit = idleFiles;
  }

  /** How many files this client has mapped (held or idle). */
  get mappedFiles(): number {
    return this.#files.size;
  }

  /**
   * Takes one reference the producer sent (its `increment()`): records this thread as the slot's holder and counts
   * the reference as held. Each send is acquired once.
   * @throws InvalidArgumentError for a malformed slot, a slot out of the file's range, a file that is not a
   *   ref-counter file, or more acquisitions than sends (a descriptor received twice); ForeignPointerError for a
   *   wrong nonce (forged or stale) or a slot held by another thread or process; UseAfterReleaseError for a slot
   *   the producer is done with; SharedMemoryError ENOENT when the file is gone (the producer closed or never
   *   created it). Nothing is changed when it throws.
   */
  acquire(slot: CounterSlot): void {
    const f = this.#fileFor(slot, 'acquire');
    try {
      const b = this.#validate(f, slot, 'acquire');
      const { i64 } = f.views;
      const holder = Atomics.load(i64, b + S_HOLDER);
      if (holder !== 0n && holder !== this.#holder) throw this.#heldElsewhere(slot, holder);
      const held = Atomics.load(i64, b + S_HELD);
      const count = Atomics.load(i64, b + S_COUNT);
      if (held >= count) {
        throw new InvalidArgumentError('slot', slot, `a slot with a reference sent and not yet acquired (it has ${count} sent and unreleased, ${held} acquired): a descriptor received twice?`);
      }
      if (holder === 0n) {
        const seen = Atomics.compareExchange(i64, b + S_HOLDER, 0n, this.#holder);
        if (seen !== 0n && seen !== this.#holder) throw this.#heldElsewhere(slot, seen);
      }
      Atomics.add(i64, b + S_HELD, 1n);
    } catch (error) {
      this.#settle(slot.file, f);
      throw error;
    }
    const hold = f.holds.get(slot.slot);
    if (hold === undefined) f.holds.set(slot.slot, { nonce: slot.nonce, refs: 1 });
    else hold.refs++;
  }

  /**
   * Gives back one reference this client acquired: the slot's count and held go down by one.
   * @throws DoubleFreeError when this client holds no reference to the slot (released more often than acquired;
   *   the count is unchanged, so it never goes below zero); otherwise as {@link acquire}. Nothing is changed when it
   *   throws.
   */
  release(slot: CounterSlot): void {
    if (this.#closed) throw new DisposedError('RefCounterClient.release() was called after close().');
    expectCounterSlot(slot);
    const f = this.#files.get(slot.file);
    const hold = f?.holds.get(slot.slot);
    if (f === undefined || hold === undefined) {
      throw new DoubleFreeError(`Counter slot ${describeSlot(slot)} was released more often than this consumer acquired it; the count is unchanged.`);
    }
    const b = this.#validate(f, slot, 'release');
    const { i64 } = f.views;
    const holder = Atomics.load(i64, b + S_HOLDER);
    if (holder !== this.#holder) throw this.#heldElsewhere(slot, holder);
    if (!decrementIfPositive(i64, b + S_HELD)) {
      throw new DoubleFreeError(`Counter slot ${describeSlot(slot)} has no reference held (the producer reclaimed it); the count is unchanged.`);
    }
    if (!decrementIfPositive(i64, b + S_COUNT)) {
      Atomics.add(i64, b + S_HELD, 1n);
      throw new DoubleFreeError(`Counter slot ${describeSlot(slot)} is already at count 0; the count is unchanged.`);
    }
    if (--hold.refs === 0) f.holds.delete(slot.slot);
    this.#settle(slot.file, f);
  }

  /**
   * True when the producer of `slot` is gone: its counter file is marked closed (its runtime was disposed) or its
   * process no longer exists. False when the slot's file is not mapped here (nothing held in it).
   * @throws InvalidArgumentError for something that is not a CounterSlot
   */
  producerGone(slot: CounterSlot): boolean {
    expectCounterSlot(slot);
    const f = this.#files.get(slot.file);
    if (f === undefined) return false;
    const { i32 } = f.views;
    const producer = Atomics.load(i32, H_PRODUCER_PID);
    return (Atomics.load(i32, H_FLAGS) & FLAG_CLOSED) !== 0 || (producer > 0 && !isProcessAlive(producer));
  }

  /** The slot's current count, read from the producer's file (mapping it if needed). Throws as {@link acquire}. */
  count(slot: CounterSlot): number {
    const f = this.#fileFor(slot, 'count');
    try {
      const b = this.#validate(f, slot, 'count');
      return Number(Atomics.load(f.views.i64, b + S_COUNT));
    } finally {
      this.#settle(slot.file, f);
    }
  }

  /**
   * Releases every reference still held (a consumer that is done), unmaps every file and returns how many
   * references it released. Idempotent (0 the second time). Releases that fail (the file was reclaimed) are skipped.
   */
  close(): number {
    if (this.#closed) return 0;
    let released = 0;
    for (const [file, f] of [...this.#files]) {
      for (const [slot, hold] of [...f.holds]) {
        for (let i = hold.refs; i > 0; i--) {
          try {
            this.release({ file, slot, nonce: hold.nonce });
            released++;
          } catch {
            break;
          }
        }
      }
    }
    this.#closed = true;
    for (const [name, f] of this.#files) this.#unmap(name, f);
    this.#files.clear();
    this.#idle.clear();
    return released;
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** The mapped file of `slot`, opening and checking it when it is not mapped. */
  #fileFor(slot: CounterSlot, method: string): ClientFile {
    if (this.#closed) throw new DisposedError(`RefCounterClient.${method}() was called after close().`);
    expectCounterSlot(slot);
    const mapped = this.#files.get(slot.file);
    if (mapped !== undefined) return mapped;
    const file = SharedMemoryFile.open(slot.file);
    try {
      const f = checkCounterFile(file);
      this.#files.set(slot.file, f);
      return f;
    } catch (error) {
      file.close();
      throw error;
    }
  }

  /** Checks `slot` against its file; returns the slot's BigInt64 index. */
  #validate(f: ClientFile, slot: CounterSlot, method: string): number {
    if (slot.slot >= f.slotCount) throw new InvalidArgumentError('slot.slot', slot.slot, `a slot index of ${slot.file} (0 to ${f.slotCount - 1})`);
    const handedOut = Atomics.load(f.views.i32, H_NEXT_SLOT);
    if (slot.slot >= handedOut) throw new InvalidArgumentError('slot.slot', slot.slot, `a slot the producer handed out in ${slot.file} (0 to ${handedOut - 1})`);
    const b = slotBigIndex(slot.slot);
    if (Atomics.load(f.views.i64, b + S_NONCE) !== slot.nonce) {
      throw new ForeignPointerError(`Counter slot ${describeSlot(slot)} carries the wrong nonce: the descriptor is forged or stale.`);
    }
    if (Atomics.load(f.views.i32, slotIntIndex(slot.slot) + S32_STATE) !== STATE_LIVE) {
      throw new UseAfterReleaseError(`Counter slot ${describeSlot(slot)} was used (${method}) after its producer finished with it.`);
    }
    return b;
  }

  #heldElsewhere(slot: CounterSlot, holder: bigint): ForeignPointerError {
    return new ForeignPointerError(
      `Counter slot ${describeSlot(slot)} is held by thread ${holderThreadId(holder)} of process ${holderPid(holder)}, not by this consumer ` +
        `(thread ${this.threadId} of process ${this.pid}); a slot has one holder: send each consumer its own slot.`,
    );
  }

  /**
   * After a change to `f`'s holds: a file with none joins the idle files (in the order files became idle; one that
   * is held again stays listed until it reaches the front, where it is dropped from the list, not unmapped), and
   * the oldest idle files beyond the limit are unmapped.
   */
  #settle(name: string, f: ClientFile): void {
    if (f.holds.size > 0 || this.#files.get(name) !== f || this.#idle.has(name)) return;
    this.#idle.add(name);
    while (this.#idle.size > this.#idleLimit) {
      const oldest = this.#idle.values().next().value!;
      this.#idle.delete(oldest);
      const g = this.#files.get(oldest)!;
      if (g.holds.size > 0) continue;
      this.#files.delete(oldest);
      this.#unmap(oldest, g);
    }
  }

  /**
   * Unmaps `f`, and unlinks it when it is orphaned and nothing in it is in flight.
   *
   * Note [Orphaned counter files]: a producer that died without closing its counters (a crash, kill -9) unlinked
   * none of its files: they are orphaned, no producer will unlink them. The consumer that unmaps one when nothing in
   * it is in flight (no descriptor sent and not yet received: every count at most what its holder acquired)
   * unlinks it. Consumers that hold slots have the file mapped and release into the mapping, so a departed
   * producer's counters do not stay in /dev/shm once its consumers have what was sent, and a consumer that is done
   * early does not take the file from one whose descriptor is still on its way. A descriptor that never reaches
   * anyone (its consumer died before reading it) leaves its file behind. A producer's close() unlinks its files
   * itself (RefCounterFiles).
   */
  #unmap(name: string, f: ClientFile): void {
    const { i32 } = f.views;
    const producer = Atomics.load(i32, H_PRODUCER_PID);
    const producerGone = (Atomics.load(i32, H_FLAGS) & FLAG_CLOSED) !== 0 || (producer > 0 && !isProcessAlive(producer));
    const orphaned = producerGone && !anyInFlight(f.views);
    f.file.close();
    if (!orphaned) return;
    try {
      SharedMemoryFile.unlink(name);
    } catch {
      // Best effort (EACCES: another user's file); the producer's own close() is the normal path.
    }
  }
}

/** Decrements `a[i]` when it is above zero; false (nothing changed) when it is not. */
function decrementIfPositive(a: BigInt64Array, i: number): boolean {
  for (;;) {
    const v = Atomics.load(a, i);
    if (v <= 0n) return false;
    if (Atomics.compareExchange(a, i, v, v - 1n) === v) return true;
  }
}

function checkCounterFile(file: SharedMemoryFile): ClientFile {
  const notCounterFile = (why: string): InvalidArgumentError =>
    new InvalidArgumentError('slot.file', file.name, `the name of a Stowage ref-counter file (${why})`);
  if (file.byteLength < HEADER_BYTES) throw notCounterFile(`it has ${file.byteLength} bytes, fewer than a header`);
  const views = counterViews(file.buffer);
  const { i32 } = views;
  if (Atomics.load(i32, H_MAGIC) !== MAGIC) throw notCounterFile('its magic number is wrong');
  if (Atomics.load(i32, H_VERSION) !== VERSION) throw notCounterFile(`its version is ${Atomics.load(i32, H_VERSION)}, not ${VERSION}`);
  const slotCount = Atomics.load(i32, H_SLOT_COUNT);
  if (Atomics.load(i32, H_HEADER_BYTES) !== HEADER_BYTES || Atomics.load(i32, H_SLOT_BYTES) !== SLOT_BYTES || slotCount < 1 || fileBytes(slotCount) !== file.byteLength) {
    throw notCounterFile('its header does not match its size');
  }
  return { file, views, slotCount, holds: new Map() };
}
