// Note [Ref-counter file layout]
// A ref-counter file is a POSIX shared-memory object holding a 64-byte header and `slotCount` slots of 64 bytes
// (one cache line each, so that counters of different storages never share a line). All fields are little-endian
// and naturally aligned; they are read and written with Atomics on Int32Array / BigInt64Array views of the mapping.
//
//   header  (bytes 0..63, Int32 indices)
//     [0] magic 0x43525453 ('STRC')   [1] version (1)   [2] header bytes (64)   [3] slot bytes (64)
//     [4] slotCount                    [5] nextSlot: slots handed out so far (slot indices increase; never reused)
//     [6] slotsDone: slots the producer has finished with
//     [7] producer pid                 [8] flags: bit 0 = closed (the producer unlinked the file)
//   slot i  (bytes 64 + 64·i ..)
//     +0  count      int64  references sent and not yet released or reclaimed (signed; never below 0)
//     +8  nonce      int64  random, non-zero while the slot is handed out; 0 while free
//     +16 held       int64  references the holder has acquired and not released (held ≤ count)
//     +24 holder     int64  (holder pid << 32) | holder thread id, 0 while no consumer has acquired the slot;
//                           read as two int32: +24 thread id (worker_threads.threadId), +28 pid
//     +32 state      int32  0 free, 1 live (handed out), 2 done (the producer will not use it again)
//     +36 producer   int32  the producer's pid
//     +40..63 reserved (0)
//
// Writers: the producer writes the header, nonce, state and producer fields and increments count; a consumer
// writes holder and held and decrements count; the producer's reclaim exchanges held with 0 and subtracts it.
// Counters are signed 64-bit and checked before each decrement (compare-and-exchange), so they never wrap below
// zero, unlike PyTorch's uint64 reading (pytorch/pytorch#149187).

export const MAGIC = 0x43525453;
export const VERSION = 1;
export const HEADER_BYTES = 64;
export const SLOT_BYTES = 64;

/** Int32 indices in the header. */
export const H_MAGIC = 0;
export const H_VERSION = 1;
export const H_HEADER_BYTES = 2;
export const H_SLOT_BYTES = 3;
export const H_SLOT_COUNT = 4;
export const H_NEXT_SLOT = 5;
export const H_SLOTS_DONE = 6;
export const H_PRODUCER_PID = 7;
export const H_FLAGS = 8;
export const FLAG_CLOSED = 1;

/** Slot states. */
export const STATE_FREE = 0;
export const STATE_LIVE = 1;
export const STATE_DONE = 2;

/** BigInt64 index of slot `i`'s first field; add the S_* field offsets. */
export const slotBigIndex = (i: number): number => (HEADER_BYTES + SLOT_BYTES * i) / 8;
export const S_COUNT = 0;
export const S_NONCE = 1;
export const S_HELD = 2;
export const S_HOLDER = 3;
/** Int32 index of slot `i`'s first field; add the S32_* field offsets. */
export const slotIntIndex = (i: number): number => (HEADER_BYTES + SLOT_BYTES * i) / 4;
export const S32_STATE = 8;
export const S32_PRODUCER = 9;

/** The file size for `slotCount` slots. */
export const fileBytes = (slotCount: number): number => HEADER_BYTES + SLOT_BYTES * slotCount;

/** The holder word of thread `threadId` of process `pid`. */
export const holderWord = (pid: number, threadId: number): bigint => (BigInt(pid) << 32n) | BigInt(threadId);
export const holderPid = (word: bigint): number => Number(word >> 32n);
export const holderThreadId = (word: bigint): number => Number(word & 0xffff_ffffn);

/** Typed views of one mapped ref-counter file. */
export interface CounterViews {
  readonly i32: Int32Array;
  readonly i64: BigInt64Array;
}

export function counterViews(buffer: ArrayBuffer): CounterViews {
  return { i32: new Int32Array(buffer), i64: new BigInt64Array(buffer) };
}

/**
 * True when a live slot handed out in the file has a reference in flight: a count above what its holder acquired (a
 * descriptor sent and not yet received). The consumers that received theirs have the file mapped; one in flight
 * still has to open it by name.
 */
export function anyInFlight(views: CounterViews): boolean {
  const { i32, i64 } = views;
  const handedOut = Atomics.load(i32, H_NEXT_SLOT);
  for (let slot = 0; slot < handedOut; slot++) {
    const b = slotBigIndex(slot);
    if (Atomics.load(i32, slotIntIndex(slot) + S32_STATE) === STATE_LIVE && Atomics.load(i64, b + S_COUNT) > Atomics.load(i64, b + S_HELD)) return true;
  }
  return false;
}
