import type { OfflineOp, OfflineTensor, OfflineTrace } from './OfflineTrace.js';

/**
 * Builds an `OfflineTrace` from a program as it runs: one `recordOp` per operation (what it pins, what it writes)
 * and one `recordRelease` per released tensor. Keys are compared by identity (a `StorageImpl`, say) and numbered in
 * the order they are first seen.
 *
 * - A key first seen written is created by that op; one first seen only read exists before the trace, on the host.
 * - A release frees the key after the last recorded op; a key seen again after its release is a new tensor.
 * - LMS's own events cannot give this: `pageOut`/`pageIn` say nothing of ops, and a policy's `onPin` sees neither
 *   which pins form one op nor which storages it writes. Record where ops pin instead (a wrapper of `pin`).
 *
 * Invariants: every id in `ops` is in `tensors`; `#live` holds exactly the keys seen and not released since.
 */
export class OfflineTraceRecorder<K extends object> {
  readonly #tensors: OfflineTensor[] = [];
  readonly #ops: { pins: number[]; creates: number[]; writes: number[]; frees: number[] }[] = [];
  /** Each live key's id. */
  readonly #live = new Map<K, number>();

  /** @param bytesOf the bytes a key takes on the device (`(s: StorageImpl) => s.byteLength`); read when first seen */
  constructor(private readonly bytesOf: (key: K) => number) {}

  /**
   * Records one op that needs `pins` resident together and writes `writes`, which it pins too (a written key
   * missing from `pins` is added to them).
   */
  recordOp(pins: Iterable<K>, writes: Iterable<K> = []): void {
    const op = { pins: [] as number[], creates: [] as number[], writes: [] as number[], frees: [] as number[] };
    const written = new Set(writes);
    for (const key of new Set([...pins, ...written])) {
      let id = this.#live.get(key);
      if (id === undefined) {
        id = this.#tensors.length;
        this.#tensors.push({ id, bytes: this.bytesOf(key) });
        this.#live.set(key, id);
        if (written.has(key)) op.creates.push(id);
      }
      op.pins.push(id);
      if (written.has(key) && !op.creates.includes(id)) op.writes.push(id);
    }
    this.#ops.push(op);
  }

  /** Records that `key` was released after the last recorded op; a key no op has used is ignored. */
  recordRelease(key: K): void {
    const id = this.#live.get(key);
    if (id === undefined) return;
    this.#live.delete(key);
    this.#ops[this.#ops.length - 1]?.frees.push(id);
  }

  /** The trace recorded so far (a copy: recording goes on unaffected), with empty lists left out. */
  trace(): OfflineTrace {
    const ops = this.#ops.map(({ pins, creates, writes, frees }): OfflineOp => ({
      pins: [...pins],
      ...(creates.length > 0 ? { creates: [...creates] } : {}),
      ...(writes.length > 0 ? { writes: [...writes] } : {}),
      ...(frees.length > 0 ? { frees: [...frees] } : {}),
    }));
    return { tensors: this.#tensors.map((t) => ({ ...t })), ops };
  }
}
