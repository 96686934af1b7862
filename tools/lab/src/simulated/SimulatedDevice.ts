/**
 * A device whose memory is real host memory and whose time is simulated: copies and kernels take simulated
 * nanoseconds on three engines that overlap as a GPU's do, so that a workload (an LMS run) can be measured as if
 * on a device with a given host link, bit-exactly and deterministically, on any machine.
 *
 * - Memory is a wrapped CpuMemoryBackend (ArrayBuffer segments); every byte operation happens at once on the host,
 *   so results do not depend on the simulated schedule. With `addressOnly`, segments are address ranges that hold
 *   only the bytes written through the device (AddressMemory.ts, Note [Address-only memory]): the same schedule,
 *   without the bytes, for working sets larger than the machine's memory.
 * - Three engines: `compute` (kernels, device-to-device copies), `h2d` and `d2h` (copies over the link, one
 *   direction each). Each runs its operations one at a time, in the order they were enqueued.
 * - An operation starts at the latest of: the host's clock (`now`), its engine becoming free, and the end of
 *   every earlier operation it has a data hazard with (AccessHazards: read after write, write after write, write
 *   after read, on overlapping bytes of one segment). So a kernel waits for a page-in into a block it uses, a
 *   page-out for the kernels that write its block, and a reuse of a freed block for the page-out reading it.
 * - A copy takes `latencyNs + ceil(bytes / bandwidth)` (LinkProfile.ts); a kernel takes what its caller says; a
 *   device-to-device copy reads and writes each byte at `memoryBytesPerSecond`.
 * - The host's clock moves only when the host waits (`hostWait`, `synchronize`, `synchronizeEvent`, and `free` of
 *   a segment with work pending: Note [A freed segment's pending work]); enqueueing costs no simulated time, nor
 *   does `malloc`.
 *
 * Note [Work at enqueue]: every operation does its work on the bytes when it is enqueued (a kernel's `run`, a
 * copy's bytes), in program order, while the simulated schedule may run it later and reorder it against others.
 * The two give the same bytes because the schedule only reorders operations without a hazard between them: any
 * two that touch the same bytes, one of them writing, run in program order in simulated time too (the later
 * starts after the earlier ends), and operations touching disjoint bytes commute. This holds for the work the
 * device sees: kernels (whose `reads` and `writes` must name every block `run` touches), `write`, `read`, `copy`
 * and the pager. A program that writes a segment's bytes some other way is outside the model.
 */
import { EventEmitter } from 'eventemitter3';
import type { AllocateOptions, Device, DeviceLike, MemoryBackend, Pager } from '@stowage/core';
import type { BackendEvent, HostBuffer, MemoryBlock, SegmentOptions, StreamId } from '@stowage/core/plugin-kit';
import { CpuMemoryBackend, DataPtr, formatDevice, InvalidArgumentError, parseDevice, UseAfterReleaseError } from '@stowage/core';
import { checkBoolean, checkCount, checkFunction, checkOptions, isSameDevice } from '@stowage/core/plugin-kit';
import type { AddressSegment } from './AddressMemory.js';
import { AddressMemory } from './AddressMemory.js';
import type { ByteRange } from './AccessHazards.js';
import { AccessHazards, byteRange } from './AccessHazards.js';
import type { LinkName, LinkProfile } from './LinkProfile.js';
import { copyDurationNs, resolveLink } from './LinkProfile.js';
import { SimulatedPager } from './SimulatedPager.js';

export type EngineName = 'compute' | 'h2d' | 'd2h';

/** One operation as the simulated device ran it. */
export interface TimelineEntry {
  readonly engine: EngineName;
  /** The kernel's name; `pageOut`, `pageIn`, `write`, `read` or `copy` for the device's own operations. */
  readonly name: string;
  /** Simulated nanoseconds since the device was made. */
  readonly startNs: number;
  readonly endNs: number;
  /** Bytes moved, for copies. */
  readonly bytes?: number;
}

/** One engine's totals. Invariant: busyNs + idleNs == the end of the engine's last operation (0 when none). */
export interface EngineStats {
  readonly operations: number;
  /** Nanoseconds the engine ran operations. */
  readonly busyNs: number;
  /** Nanoseconds the engine sat idle before each operation: since 0 for the first, since the previous one's end after. */
  readonly idleNs: number;
  /** Bytes its copies moved (0 for compute's kernels). */
  readonly bytes: number;
}

export interface SimulatedDeviceStats {
  /** The host's clock. */
  readonly nowNs: number;
  /** When the last operation enqueued so far ends (what `synchronize()` would wait for). */
  readonly makespanNs: number;
  readonly compute: EngineStats;
  readonly h2d: EngineStats;
  readonly d2h: EngineStats;
}

/** What a SimulatedDevice reports (`events`), past tense. */
export interface SimulatedDeviceEvents {
  /**
   * An operation was enqueued, with what it touches and waits for: enough to schedule it again on another
   * device (a replay on another link). Emitted once the device's state is consistent; a listener's error
   * propagates to whoever enqueued (the pager, inside LMS), so listeners must not throw.
   */
  enqueued: [e: { readonly entry: TimelineEntry; readonly access: OperationAccess }];
}

/** What an operation touches and waits for, beyond its engine and the host's clock. */
export interface OperationAccess {
  readonly reads?: readonly ByteRange[];
  readonly writes?: readonly ByteRange[];
  /** It starts no earlier than this (a page-in: when its bytes reached the host), simulated ns. Default 0. */
  readonly afterNs?: number;
  /** Bytes it moves, for copies: recorded in its entry and the engine's totals. */
  readonly bytes?: number;
}

/** The bytes a kernel reads and writes; its data hazards are taken from them. */
export interface KernelAccess {
  readonly reads?: readonly DataPtr[];
  readonly writes?: readonly DataPtr[];
}

export interface SimulatedDeviceOptions {
  /** The host link's profile (Note [Link profiles] in LinkProfile.ts). Default `'pcie4'`. */
  readonly link?: LinkName | LinkProfile;
  /**
   * Device memory bandwidth in bytes per second, for device-to-device copies (`copy`). Default 3.35e12, an H100
   * SXM's HBM3 as NVIDIA states it.
   */
  readonly memoryBytesPerSecond?: number;
  /** The device its pointers name. Default `{ type: 'sim', index: 0 }`. */
  readonly device?: DeviceLike;
  /** What the device can hold: `malloc` returns null past it. Unknown (unbounded) when absent. */
  readonly capacityBytes?: number;
  /**
   * Keep addresses and timing, not bytes (Note [Address-only memory] in AddressMemory.ts): segments hold no memory,
   * only bytes written through the device are kept, and kernels' work is not. Default false.
   */
  readonly addressOnly?: boolean;
}

/** A segment's handle: an ArrayBuffer over host memory, or an AddressSegment with `addressOnly`. */
export type SimulatedHandle = HostBuffer | AddressSegment;

/** What SimulatedDevice uses of its memory: CpuMemoryBackend, or AddressMemory with `addressOnly`. */
interface SimulatedMemory {
  readonly alignment: number;
  readonly capacityBytes: number | undefined;
  readonly pager: Pager;
  segmentKind(options: AllocateOptions): number;
  malloc(byteLength: number, options?: SegmentOptions): MemoryBlock<SimulatedHandle> | null;
  free(segment: MemoryBlock<SimulatedHandle>): void;
  copy(dst: SimulatedHandle, dstOffset: number, src: SimulatedHandle, srcOffset: number, byteLength: number): void;
  write(dst: SimulatedHandle, dstOffset: number, bytes: Uint8Array): void;
  read(src: SimulatedHandle, srcOffset: number, byteLength: number): Promise<Uint8Array>;
}

const H100_HBM3_BYTES_PER_SECOND = 3.35e12;

interface EngineState {
  freeAtNs: number;
  operations: number;
  busyNs: number;
  idleNs: number;
  bytes: number;
}

interface SimulatedEvent extends BackendEvent {
  /** When the work enqueued before the event ends. */
  readonly atNs: number;
}

/**
 * Simulated time over host memory; see the file header for the model. Use it as a CachingAllocator's backend
 * (`new CachingAllocator(device)`), run "kernels" with `kernel`, and read the schedule from `timeline`, `stats`
 * and `now`. Page-outs and page-ins go through `pager` (SimulatedPager.ts).
 *
 * Invariants: for each engine, its operations in `timeline` do not overlap and start in enqueue order;
 * engine.freeAtNs == the end of its last operation; every operation starts at or after the host's clock when it
 * was enqueued; makespanNs == the largest freeAtNs.
 */
export class SimulatedDevice implements MemoryBackend<SimulatedHandle> {
  readonly device: Device;
  readonly alignment: number;
  readonly capacityBytes: number | undefined;
  readonly defaultStream: StreamId = 0;
  readonly link: LinkProfile;
  /** Device memory bandwidth, bytes per second. */
  readonly memoryBytesPerSecond: number;
  /** True when the device keeps addresses and timing only (Note [Address-only memory] in AddressMemory.ts). */
  readonly addressOnly: boolean;
  readonly pager: SimulatedPager;
  /** Operations as they are enqueued: subscribe only; the device emits. */
  readonly events: Pick<EventEmitter<SimulatedDeviceEvents>, 'on' | 'once' | 'off' | 'listenerCount'>;
  readonly #emitter = new EventEmitter<SimulatedDeviceEvents>();
  readonly #memory: SimulatedMemory;
  readonly #hazards = new AccessHazards();
  readonly #engines: Record<EngineName, EngineState>;
  readonly #timeline: TimelineEntry[] = [];
  #nowNs = 0;
  #makespanNs = 0;

  /** @throws InvalidArgumentError for an unknown key, link, device, or a bad bandwidth or capacity */
  constructor(given: SimulatedDeviceOptions = {}) {
    const options = checkOptions('options', given, ['link', 'memoryBytesPerSecond', 'device', 'capacityBytes', 'addressOnly']);
    this.link = resolveLink(options.link ?? 'pcie4');
    const memoryBytesPerSecond = options.memoryBytesPerSecond ?? H100_HBM3_BYTES_PER_SECOND;
    if (!Number.isSafeInteger(memoryBytesPerSecond) || memoryBytesPerSecond <= 0) {
      throw new InvalidArgumentError('options.memoryBytesPerSecond', memoryBytesPerSecond, 'a positive whole number of bytes per second');
    }
    this.memoryBytesPerSecond = memoryBytesPerSecond;
    this.device = parseDevice(options.device ?? { type: 'sim', index: 0 }, 'options.device');
    this.addressOnly = checkBoolean('options.addressOnly', options.addressOnly) ?? false;
    const capacity = options.capacityBytes === undefined ? {} : { capacityBytes: options.capacityBytes };
    this.#memory = this.addressOnly ? new AddressMemory(this.device, capacity) : (new CpuMemoryBackend(capacity) as SimulatedMemory);
    this.alignment = this.#memory.alignment;
    this.capacityBytes = this.#memory.capacityBytes;
    const engine = (): EngineState => ({ freeAtNs: 0, operations: 0, busyNs: 0, idleNs: 0, bytes: 0 });
    this.#engines = { compute: engine(), h2d: engine(), d2h: engine() };
    this.pager = new SimulatedPager(this, this.#memory.pager);
    this.events = this.#emitter;
  }

  /** The host's clock, simulated nanoseconds. */
  get now(): number {
    return this.#nowNs;
  }

  /** Every operation so far, in enqueue order. */
  get timeline(): readonly TimelineEntry[] {
    return this.#timeline;
  }

  get stats(): SimulatedDeviceStats {
    const { compute, h2d, d2h } = this.#engines;
    return { nowNs: this.#nowNs, makespanNs: this.#makespanNs, compute: engineStats(compute), h2d: engineStats(h2d), d2h: engineStats(d2h) };
  }

  /** The gaps in which `engine` sat idle between 0 and the end of its last operation, in order. */
  idleGaps(engine: EngineName): { readonly startNs: number; readonly endNs: number }[] {
    const gaps: { startNs: number; endNs: number }[] = [];
    let freeAtNs = 0;
    for (const entry of this.#timeline) {
      if (entry.engine !== engine) continue;
      if (entry.startNs > freeAtNs) gaps.push({ startNs: freeAtNs, endNs: entry.startNs });
      freeAtNs = entry.endNs;
    }
    return gaps;
  }

  /**
   * Enqueues a kernel of `durationNs` on the compute engine and returns its entry. It starts once the engine is
   * free and every earlier operation it has a hazard with has ended (a page-in into a block it reads or writes, a
   * page-out reading a block it writes, a kernel writing what it reads). `run`, when given, does the kernel's work
   * on the bytes now, before anything is scheduled: when it throws, nothing is, and the error propagates.
   * @throws InvalidArgumentError for a bad name or duration, a pointer of another device, or a `run` that is not a
   * function; UseAfterReleaseError for a released pointer
   */
  kernel(name: string, durationNs: number, access: KernelAccess, run?: () => void): TimelineEntry {
    if (typeof name !== 'string' || name === '') throw new InvalidArgumentError('name', name, 'a non-empty string');
    checkCount('durationNs', durationNs);
    const checked = checkOptions('access', access, ['reads', 'writes']);
    const reads = this.#rangesOf(checked.reads, 'access.reads');
    const writes = this.#rangesOf(checked.writes, 'access.writes');
    if (run !== undefined) checkFunction('run', run)();
    return this.enqueue('compute', name, durationNs, { reads, writes });
  }

  /**
   * Enqueues one operation on `engine` and returns its entry: it starts at the latest of the host's clock, the
   * engine becoming free, `access.afterNs`, and the end of every earlier operation it has a hazard with. For the
   * pager, the backend methods, and a driver modelling other copies; moves no bytes (Note [Work at enqueue]: the
   * caller does the work now). Preconditions (unchecked): `durationNs` is a non-negative whole number; every range
   * lies in a live segment of this device (`byteRange(ptr.handle, ptr.byteOffset, ptr.byteLength)`).
   */
  enqueue(engine: EngineName, name: string, durationNs: number, access: OperationAccess): TimelineEntry {
    const { reads = [], writes = [], afterNs = 0, bytes } = access;
    const state = this.#engines[engine];
    const startNs = Math.max(this.#nowNs, state.freeAtNs, afterNs, this.#hazards.readyAtNs(reads, writes));
    const endNs = startNs + durationNs;
    state.idleNs += startNs - state.freeAtNs;
    state.busyNs += durationNs;
    state.freeAtNs = endNs;
    state.operations++;
    if (bytes !== undefined) state.bytes += bytes;
    if (endNs > this.#makespanNs) this.#makespanNs = endNs;
    this.#hazards.record(reads, writes, endNs);
    const entry: TimelineEntry = Object.freeze(bytes === undefined ? { engine, name, startNs, endNs } : { engine, name, startNs, endNs, bytes });
    this.#timeline.push(entry);
    if (this.#emitter.listenerCount('enqueued') > 0) this.#emitter.emit('enqueued', { entry, access: { reads, writes, afterNs, ...(bytes === undefined ? {} : { bytes }) } });
    return entry;
  }

  /** Nanoseconds a copy of `byteLength` bytes takes over the link, either way. */
  copyDurationNs(byteLength: number): number {
    return copyDurationNs(this.link, byteLength);
  }

  /**
   * Moves the host's clock to `untilNs` (no earlier than now) and returns it. Operations enqueued later start no
   * earlier.
   * @throws InvalidArgumentError when `untilNs` is not a non-negative whole number
   */
  hostWait(untilNs: number): number {
    checkCount('untilNs', untilNs);
    if (untilNs > this.#nowNs) {
      this.#nowNs = untilNs;
      this.#hazards.prune(untilNs);
    }
    return this.#nowNs;
  }

  /** Waits on the host until every operation enqueued so far has ended; returns the host's clock. */
  synchronize(): number {
    return this.hostWait(this.#makespanNs);
  }

  segmentKind(options: AllocateOptions): number {
    return this.#memory.segmentKind(options);
  }

  malloc(byteLength: number, options?: SegmentOptions): MemoryBlock<SimulatedHandle> | null {
    return this.#memory.malloc(byteLength, options);
  }

  /**
   * Gives a segment back to the device. Note [A freed segment's pending work]: the host first waits until every
   * operation that touches the segment has ended, as `cudaFree` synchronizes before memory returns to the device.
   * Without the wait, a page-out still reading a freed segment would overlap writes to the memory a new segment
   * takes over (address-only segments carry no hazard between them): a schedule no device runs, and the published
   * setups' times came out up to 13 % too short (BERT-large) when the engine freed cached segments to retry.
   */
  free(segment: MemoryBlock<SimulatedHandle>): void {
    this.hostWait(this.#hazards.lastEndNs(segment.handle));
    this.#hazards.forget(segment.handle);
    this.#memory.free(segment);
  }

  /** A device-to-device copy on the compute engine: reads and writes each byte at `memoryBytesPerSecond`. */
  copy(dst: SimulatedHandle, dstOffset: number, src: SimulatedHandle, srcOffset: number, byteLength: number): void {
    this.#memory.copy(dst, dstOffset, src, srcOffset, byteLength);
    const durationNs = copyDurationNs({ bytesPerSecond: this.memoryBytesPerSecond, latencyNs: 0 }, 2 * byteLength);
    this.enqueue('compute', 'copy', durationNs, { reads: [byteRange(src, srcOffset, byteLength)], writes: [byteRange(dst, dstOffset, byteLength)] });
  }

  /** A host-to-device copy on the h2d engine (as `queue.writeBuffer` or `cudaMemcpyAsync`: in device order). */
  write(dst: SimulatedHandle, dstOffset: number, bytes: Uint8Array): void {
    this.#memory.write(dst, dstOffset, bytes);
    const byteLength = bytes.byteLength;
    this.enqueue('h2d', 'write', this.copyDurationNs(byteLength), { writes: [byteRange(dst, dstOffset, byteLength)], bytes: byteLength });
  }

  /**
   * A device-to-host copy on the d2h engine. The bytes are read now and the promise resolves at once; the copy's
   * simulated end is the entry's (`timeline`), which a host that awaits the bytes should `hostWait` for.
   */
  read(src: SimulatedHandle, srcOffset: number, byteLength: number): Promise<Uint8Array> {
    const bytes = this.#memory.read(src, srcOffset, byteLength);
    this.enqueue('d2h', 'read', this.copyDurationNs(byteLength), { reads: [byteRange(src, srcOffset, byteLength)], bytes: byteLength });
    return bytes;
  }

  isStream(stream: StreamId): boolean {
    return stream === 0;
  }

  /** An event after everything enqueued so far, on any engine. */
  recordEvent(stream: StreamId): BackendEvent {
    const event: SimulatedEvent = { stream, atNs: this.#makespanNs };
    return event;
  }

  /** True once the host's clock has reached the event. */
  isEventComplete(event: BackendEvent): boolean {
    return this.#nowNs >= (event as SimulatedEvent).atNs;
  }

  /** Moves the host's clock to the event. */
  synchronizeEvent(event: BackendEvent): void {
    this.hostWait((event as SimulatedEvent).atNs);
  }

  /** The bytes of live pointers of this device, for a kernel's hazards. */
  #rangesOf(ptrs: readonly DataPtr[] | undefined, argument: string): ByteRange[] {
    if (ptrs === undefined) return [];
    if (!Array.isArray(ptrs)) throw new InvalidArgumentError(argument, ptrs, 'an array of DataPtrs (or nothing)');
    return ptrs.map((ptr: DataPtr, i) => {
      const at = `${argument}[${i}]`;
      if (!(ptr instanceof DataPtr)) throw new InvalidArgumentError(at, ptr, 'a DataPtr');
      if (!isSameDevice(ptr.device, this.device)) throw new InvalidArgumentError(at, ptr, `a pointer of ${formatDevice(this.device)}`);
      if (ptr.isReleased) throw new UseAfterReleaseError(`${at}: the ${ptr.byteLength}-byte allocation at address 0x${ptr.address.toString(16)} on ${formatDevice(this.device)} was already released.`);
      return byteRange(ptr.handle as SimulatedHandle, ptr.byteOffset, ptr.byteLength);
    });
  }
}

function engineStats(state: EngineState): EngineStats {
  return { operations: state.operations, busyNs: state.busyNs, idleNs: state.idleNs, bytes: state.bytes };
}
