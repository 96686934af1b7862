import { InvalidArgumentError } from '@stowage/core';
import type { IterationTrace, TraceOp, TraceTensor } from './Trace.js';

/** The tensors one op uses; each is a handle returned by `TraceBuilder#persistent` or `#tensor`. */
export interface OpUses {
  /** Tensors it reads and does not write. */
  readonly reads?: readonly number[];
  /**
   * Tensors it writes: the first op to write an iteration tensor creates it; any later writer (a gradient
   * accumulated into, a weight or optimizer state updated) updates it in place.
   */
  readonly writes?: readonly number[];
  readonly flops: number;
}

/** A declared tensor: persistent, or of the iteration. */
interface Declared {
  readonly name: string;
  readonly bytes: number;
  readonly isPersistent: boolean;
}

/** An op as `op` records it, on handles; `build` adds its frees. */
interface RecordedOp {
  readonly name: string;
  readonly reads: readonly number[];
  readonly creates: readonly number[];
  readonly updates: readonly number[];
  readonly flops: number;
}

/** What one `build` gives: the persistent tensors the ops use, and the iteration. */
export interface BuiltIteration {
  readonly persistent: readonly TraceTensor[];
  readonly iteration: IterationTrace;
}

/**
 * Records one iteration of a trace, op by op, and derives what `Trace.ts`'s rules make mechanical:
 *
 * - A write is a create when it is the tensor's first write, an update otherwise (`OpUses.writes`).
 * - Each iteration tensor is freed by the op that uses it last; persistent tensors are never freed.
 * - `bytesAccessed` is the bytes of the distinct tensors the op reads and writes.
 * - Handles are provisional; `build` numbers the persistent tensors 0, 1, … in declaration order and the iteration
 *   tensors after them, so that two iterations that declare the same persistent tensors in the same order give them
 *   the same ids.
 *
 * Invariant: `#createdBy[t]` is the index of the op that created iteration tensor t, or undefined before that op.
 */
export class TraceBuilder {
  readonly #tensors: Declared[] = [];
  readonly #ops: RecordedOp[] = [];
  readonly #createdBy: (number | undefined)[] = [];

  /** Declares a tensor that lives across iterations (a weight, optimizer state); returns its handle. */
  persistent(name: string, bytes: number): number {
    return this.#declare(name, bytes, true);
  }

  /** Declares a tensor of this iteration; the first op that writes it creates it. Returns its handle. */
  tensor(name: string, bytes: number): number {
    return this.#declare(name, bytes, false);
  }

  bytesOf(handle: number): number {
    return this.#get(handle).bytes;
  }

  nameOf(handle: number): string {
    return this.#get(handle).name;
  }

  /**
   * Appends an op.
   * @throws InvalidArgumentError when it reads an iteration tensor that no earlier op created, or reads and writes
   *   the same tensor
   */
  op(name: string, uses: OpUses): void {
    const reads = [...new Set(uses.reads ?? [])];
    const writes = [...new Set(uses.writes ?? [])];
    const creates: number[] = [];
    const updates: number[] = [];
    for (const t of reads) {
      if (writes.includes(t)) throw new InvalidArgumentError(`${name}.reads`, this.nameOf(t), 'tensors the op does not also write (a write reads too)');
      if (!this.#exists(t)) throw new InvalidArgumentError(`${name}.reads`, this.nameOf(t), 'tensors that an earlier op created');
    }
    for (const t of writes) {
      if (this.#exists(t)) {
        updates.push(t);
      } else {
        creates.push(t);
        this.#createdBy[t] = this.#ops.length;
      }
    }
    this.#ops.push({ name, reads, creates, updates, flops: uses.flops });
  }

  /**
   * The persistent tensors and the iteration recorded so far, with final ids.
   * @throws InvalidArgumentError when an iteration tensor was declared but never written
   */
  build(): BuiltIteration {
    const ids: number[] = [];
    let persistentCount = 0;
    this.#tensors.forEach((t, handle) => {
      if (t.isPersistent) ids[handle] = persistentCount++;
    });
    let next = persistentCount;
    this.#tensors.forEach((t, handle) => {
      if (t.isPersistent) return;
      if (this.#createdBy[handle] === undefined) throw new InvalidArgumentError('tensor', t.name, 'written by some op');
      ids[handle] = next++;
    });
    const finalTensor = (handle: number): TraceTensor => ({ id: ids[handle]!, bytes: this.bytesOf(handle), name: this.nameOf(handle) });

    const lastUse: number[] = [];
    this.#ops.forEach((op, i) => {
      for (const t of [...op.reads, ...op.creates, ...op.updates]) lastUse[t] = i;
    });
    const frees: number[][] = this.#ops.map(() => []);
    this.#tensors.forEach((t, handle) => {
      if (!t.isPersistent) frees[lastUse[handle]!]!.push(handle);
    });

    const ops: TraceOp[] = this.#ops.map((op, i) => ({
      name: op.name,
      reads: op.reads.map((t) => ids[t]!),
      creates: op.creates.map((t) => ids[t]!),
      updates: op.updates.map((t) => ids[t]!),
      frees: frees[i]!.map((t) => ids[t]!),
      flops: op.flops,
      bytesAccessed: [...op.reads, ...op.creates, ...op.updates].reduce((sum, t) => sum + this.bytesOf(t), 0),
    }));
    const handles = this.#tensors.map((_, handle) => handle);
    return {
      persistent: handles.filter((h) => this.#get(h).isPersistent).map(finalTensor),
      iteration: { tensors: handles.filter((h) => !this.#get(h).isPersistent).map(finalTensor), ops },
    };
  }

  #declare(name: string, bytes: number, isPersistent: boolean): number {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new InvalidArgumentError(`bytes of ${name}`, bytes, 'a positive whole number');
    this.#tensors.push({ name, bytes, isPersistent });
    return this.#tensors.length - 1;
  }

  #exists(handle: number): boolean {
    return this.#get(handle).isPersistent || this.#createdBy[handle] !== undefined;
  }

  #get(handle: number): Declared {
    const t = this.#tensors[handle];
    if (t === undefined) throw new InvalidArgumentError('handle', handle, 'a handle this builder returned');
    return t;
  }
}
