import { InvalidArgumentError } from '@stowage/core';
import type { StreamId } from '@stowage/core/plugin-kit';
import type { CudaDriver, CudaStream } from '../driver/CudaDriver.js';

interface StreamEntry {
  readonly device: number;
  readonly stream: CudaStream;
  /** Created here (destroyed here); false for a caller's stream, which only leaves the table. */
  readonly owned: boolean;
}

/** cuStreamCreate's flag for a stream that does not synchronize with the legacy default stream. */
const CU_STREAM_NON_BLOCKING = 1;

/**
 * The streams of one driver's devices, by the numbers the caching engine takes (`AllocateOptions.stream`,
 * `recordStream`). Stream 0 is every device's default stream: the legacy NULL stream, PyTorch's default. Every other
 * stream has a number of its own across all devices, so a stream of one device given to another device's allocator
 * is recognised as such (`deviceOf`).
 *
 * Invariants: numbers are never reused; 0 is never in the table.
 */
export class CudaStreams {
  #next = 1;
  readonly #byId = new Map<StreamId, StreamEntry>();

  constructor(private readonly driver: CudaDriver) {}

  /**
   * A new stream of `device` (whose context the caller made current).
   * `nonBlocking`: the stream does not wait for the legacy default stream (cuStreamCreate's CU_STREAM_NON_BLOCKING).
   */
  create(device: number, nonBlocking = false): StreamId {
    const stream = this.driver.streamCreate(nonBlocking ? CU_STREAM_NON_BLOCKING : 0);
    return this.#add({ device, stream, owned: true });
  }

  /** Numbers a stream the caller created on `device`; the caller keeps it and destroys it after `forget`. */
  adopt(device: number, stream: CudaStream): StreamId {
    if (typeof stream !== 'object' || stream === null || stream.kind !== 'stream') {
      throw new InvalidArgumentError('stream', stream, 'a CudaStream from CudaDriver.streamCreate');
    }
    return this.#add({ device, stream, owned: false });
  }

  /** The driver stream of a number: null for 0 (the legacy default stream). */
  handle(id: StreamId): CudaStream | null {
    return id === 0 ? null : this.#entry(id).stream;
  }

  /** The device a stream belongs to; undefined for 0 (every device's) and for numbers that name no stream. */
  deviceOf(id: StreamId): number | undefined {
    return this.#byId.get(id)?.device;
  }

  /** True when `id` is 0 or a stream of `device`. */
  isStreamOf(id: StreamId, device: number): boolean {
    return id === 0 || this.#byId.get(id)?.device === device;
  }

  /** Destroys a stream this table created, or forgets a caller's; work queued on it still runs. */
  destroy(id: StreamId): void {
    const entry = this.#entry(id);
    this.#byId.delete(id);
    if (entry.owned) this.driver.streamDestroy(entry.stream);
  }

  /** Destroys every stream this table created on `device` (its allocator is disposed). */
  destroyAll(device: number): void {
    for (const [id, entry] of this.#byId) if (entry.device === device) this.destroy(id);
  }

  #add(entry: StreamEntry): StreamId {
    const id = this.#next++;
    this.#byId.set(id, entry);
    return id;
  }

  #entry(id: StreamId): StreamEntry {
    const entry = this.#byId.get(id);
    if (entry === undefined) throw new InvalidArgumentError('stream', id, 'a stream number from createStream or adoptStream (0: the default stream)');
    return entry;
  }
}
