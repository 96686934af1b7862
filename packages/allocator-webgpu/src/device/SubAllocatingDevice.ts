import type { DataPtr } from '@stowage/core';
import { DisposedError } from '@stowage/core';
import type { WebGpuBuffers } from '../WebGpuBuffers.js';
import { BufferUsage } from '../WebGpuUsage.js';
import type { Range, UseSet } from './RangePager.js';
import { RangePager } from './RangePager.js';
import { writableStorageCode, writableStorageLayout } from './storageAccess.js';

/**
 * A GPUDevice that sub-allocates (issue 36): a JavaScript proxy of a real GPUDevice whose storage buffers are
 * ranges of Stowage segments, so that a WebGPU program (onnxruntime-web's WebGPU EP, a hand-written one) runs on
 * Stowage's memory unchanged.
 * - `createBuffer` of a buffer whose usage is STORAGE plus at most COPY_SRC | COPY_DST (no mapping, not mapped at
 *   creation) returns a StowageBuffer: a stand-in GPUBuffer (`instanceof GPUBuffer`, `size` and `usage` as asked)
 *   over a range the device's WebGpuBuffers service allocates under the device's budget. Every other buffer is the
 *   real device's.
 * - A new range reads zeros, as a new GPUBuffer does: its clear is encoded before the next submit or writeBuffer.
 * - Every method that takes a buffer translates a StowageBuffer to its segment and offset: bind group entries,
 *   `queue.writeBuffer`, the encoder's copies, `clearBuffer`, `resolveQuerySet`, `dispatchWorkgroupsIndirect`.
 * - Note [Storage bindings are all writable]: shaders and layouts are rewritten so that ranges of one segment can be
 *   read and written in one dispatch; Note [Aliased bindings]: a range bound twice in one bind group is bound once
 *   as itself and once as a copy made before each dispatch; Note [Copies within a segment]: a copy between two
 *   ranges of one segment goes through a scratch range.
 * - Note [Shared memory uploads]: `writeBuffer` from a view of a SharedArrayBuffer is copied first (dawn.node).
 * - `destroy()` frees the range; the allocator's frees wait for the next submit (Note [Submit epochs]), so work
 *   recorded before the destroy and submitted after it still reads the range's bytes. Scratch ranges are freed
 *   once the command buffer that used them is submitted.
 * - With `paging` on, ranges move between the device and the host between runs (Note [Paging between runs] in
 *   RangePager.ts): every translation above first makes the range resident, and a bind group whose ranges moved is
 *   made again where it is set (Note [Bind groups after a move]).
 * Everything else passes through to the real device.
 *
 * Invariants: every live StowageBuffer owns exactly one live pointer of `buffers` while resident and none while
 * paged out (`range.ptr` undefined, its bytes in `range.host`); a range in `#pendingClears` belongs to a live
 * StowageBuffer; the temporaries of a command buffer are freed once, after its submit; a bind group's record holds
 * the generation of each of its ranges when its current real group was made.
 */
export class SubAllocatingDevice {
  /** The proxy handed to the program. */
  readonly device: GPUDevice;
  /** createBuffer calls the program made, and how many became ranges (the rest went to the real device). */
  readonly counts = { createBuffer: 0, subAllocated: 0, scratch: 0, aliasCopies: 0, indirectCopies: 0 };
  /** Moves ranges to the host and back under the budget (Note [Paging between runs]); inert unless `paging`. */
  readonly pager: RangePager;

  readonly #real: GPUDevice;
  readonly #queue: GPUQueue;
  readonly #ranges = new WeakMap<object, Range>();
  /** New ranges whose clear is not yet encoded (Note [New ranges read zeros]). */
  readonly #pendingClears = new Set<Range>();
  /** Scratch pointers and kept objects of finished command buffers, freed after their submit. */
  readonly #temporaries = new WeakMap<GPUCommandBuffer, Temporaries>();
  /** Alias copies of bind groups (Note [Aliased bindings]). */
  readonly #aliasCopies = new WeakMap<GPUBindGroup, AliasCopy[]>();
  /** Frees the range of a StowageBuffer collected without `destroy()`. */
  readonly #collected: FinalizationRegistry<Range>;
  /** The ranges each finished command buffer names, closed at its submit (Note [Paging between runs]). */
  readonly #useSets = new WeakMap<GPUCommandBuffer, UseSet>();
  /** What a bind group was made of, to make it again after its ranges moved (Note [Bind groups after a move]). */
  readonly #groups = new WeakMap<GPUBindGroup, GroupRecord>();
  /** Frees the alias scratch of a collected bind group (a command buffer that used it keeps it until its submit). */
  readonly #collectedGroups: FinalizationRegistry<DataPtr[]>;
  #bufferPrototype: object | undefined;
  /** The real INDIRECT buffer indirect dispatches read their arguments from (Note [Indirect arguments]). */
  #indirect: GPUBuffer | undefined;

  /** @param options.paging pages ranges out between runs (Note [Paging between runs]); default false */
  constructor(
    private readonly buffers: WebGpuBuffers,
    options: { readonly paging?: boolean } = {},
  ) {
    this.#real = buffers.backend.gpuDevice;
    this.#queue = this.#real.queue;
    this.pager = new RangePager(buffers, this.#queue, options.paging === true, () => {
      const clears = this.#clearsCommandBuffer();
      if (clears) this.#queue.submit([clears]);
    });
    this.#collected = new FinalizationRegistry((range) => {
      const ptr = this.pager.forget(range);
      if (ptr !== undefined) this.#freeCollected(ptr);
    });
    this.#collectedGroups = new FinalizationRegistry((ptrs) => {
      for (const ptr of ptrs) this.#freeCollected(ptr);
    });
    this.device = passThrough(this.#real, {
      queue: passThrough(this.#queue, {
        submit: (commandBuffers: Iterable<GPUCommandBuffer>) => this.#submit(commandBuffers),
        writeBuffer: (...args: Parameters<GPUQueue['writeBuffer']>) => this.#writeBuffer(...args),
      }),
      createBuffer: (descriptor: GPUBufferDescriptor) => this.#createBuffer(descriptor),
      createBindGroup: (descriptor: GPUBindGroupDescriptor) => this.#createBindGroup(descriptor),
      createBindGroupLayout: (descriptor: GPUBindGroupLayoutDescriptor) => this.#real.createBindGroupLayout(writableStorageLayout(descriptor)),
      createShaderModule: (descriptor: GPUShaderModuleDescriptor) => this.#real.createShaderModule({ ...descriptor, code: writableStorageCode(descriptor.code) }),
      createCommandEncoder: (descriptor?: GPUCommandEncoderDescriptor) => this.#encoder(this.#real.createCommandEncoder(descriptor)),
    });
  }

  /** Frees a collected object's pointer; nothing when its allocator was disposed meanwhile (it freed everything). */
  #freeCollected(ptr: DataPtr): void {
    try {
      if (!ptr.isReleased) this.buffers.free(ptr);
    } catch (error) {
      if (!(error instanceof DisposedError)) throw error;
    }
  }

  /** True when `buffer` is a stand-in this device made. */
  isStowageBuffer(buffer: unknown): boolean {
    return typeof buffer === 'object' && buffer !== null && this.#ranges.has(buffer);
  }

  /** The segment and offset a StowageBuffer's range starts at, or the buffer itself at offset 0. */
  bindingOf(buffer: GPUBuffer): { buffer: GPUBuffer; offset: number } {
    return this.#place(buffer, undefined, false);
  }

  /**
   * Where `buffer` lies now: a range made resident first and its use noted by `set` (Note [Paging between runs]),
   * `writes` when the use may change its bytes, `wholeWrite` when it overwrites all of them.
   */
  #place(buffer: GPUBuffer, set: UseSet | undefined, writes: boolean, wholeWrite = false): { buffer: GPUBuffer; offset: number } {
    const range = this.#ranges.get(buffer);
    if (!range) return { buffer, offset: 0 };
    this.pager.use(range, set, writes, wholeWrite);
    return { buffer: range.segment, offset: range.offset };
  }

  #createBuffer(descriptor: GPUBufferDescriptor): GPUBuffer {
    this.counts.createBuffer++;
    const usage = descriptor.usage;
    const subAllocatable =
      (usage & BufferUsage.STORAGE) !== 0 && (usage & ~(SEGMENT_USAGE | INDIRECT)) === 0 && descriptor.mappedAtCreation !== true && descriptor.size > 0;
    if (!subAllocatable) return this.#real.createBuffer(descriptor);
    const ptr = this.pager.allocate(roundUp4(descriptor.size));
    const { buffer: segment, offset } = this.buffers.bindingOf(ptr);
    const range: Range = {
      ptr,
      segment,
      offset,
      size: descriptor.size,
      clearBytes: roundUp4(descriptor.size),
      destroyed: false,
      generation: 0,
      version: 0,
      lastUse: 0,
      host: undefined,
      copying: -1,
    };
    const stand = this.#standIn(segment, range, descriptor);
    this.#ranges.set(stand, range);
    this.#pendingClears.add(range);
    this.pager.track(range);
    this.#collected.register(stand, range, range);
    this.counts.subAllocated++;
    return stand;
  }

  /** A GPUBuffer look-alike over `range`: GPUBuffer's prototype, own members answering for the range. */
  #standIn(segment: GPUBuffer, range: Range, descriptor: GPUBufferDescriptor): GPUBuffer {
    this.#bufferPrototype ??= Object.getPrototypeOf(segment) as object;
    const destroy = () => this.#destroy(range);
    const stand = Object.create(this.#bufferPrototype, {
      size: { value: descriptor.size, enumerable: true },
      usage: { value: descriptor.usage, enumerable: true },
      label: { value: descriptor.label ?? '', writable: true, enumerable: true },
      mapState: { value: 'unmapped', enumerable: true },
      destroy: { value: destroy },
      mapAsync: { value: () => Promise.reject(new Error('mapAsync on a buffer without MAP_READ or MAP_WRITE usage (a Stowage range): map a staging buffer of your own.')) },
      getMappedRange: { value: () => { throw new Error('getMappedRange on a buffer that is not mapped (a Stowage range).'); } },
      unmap: { value: () => undefined },
    }) as GPUBuffer;
    return stand;
  }

  #destroy(range: Range): void {
    if (range.destroyed) return;
    range.destroyed = true;
    this.#pendingClears.delete(range);
    this.#collected.unregister(range);
    const ptr = this.pager.forget(range);
    if (ptr !== undefined) this.buffers.free(ptr);
  }

  /**
   * Note [Scratch ranges]: a scratch range must lie in another buffer than the ranges it copies between, so it comes
   * from the allocator's uniform segments (usage UNIFORM | STORAGE | COPY_SRC | COPY_DST, never shared with storage
   * segments), under the same budget.
   */
  #allocateScratch(bytes: number): DataPtr<GPUBuffer> {
    return this.pager.allocate(roundUp4(bytes), { usage: 'uniform' });
  }

  /** A scratch range of `bytes` (Note [Scratch ranges]); freed after the submit of the command buffer that used it. */
  #scratch(bytes: number, temporaries: Temporaries): { buffer: GPUBuffer; offset: number } {
    const ptr = this.#allocateScratch(bytes);
    temporaries.pointers.push(ptr);
    this.counts.scratch++;
    const { buffer, offset } = this.buffers.bindingOf(ptr);
    return { buffer, offset };
  }

  /**
   * Note [Indirect arguments]: a program asks for STORAGE | INDIRECT buffers (onnxruntime-web asks INDIRECT of every
   * storage buffer, and binds an indirect dispatch's arguments as an input of the same dispatch) but segments have no
   * INDIRECT usage. Such buffers are ranges too; an indirect dispatch from one copies its 12 bytes of arguments into
   * one small INDIRECT buffer of the device's own just before it (the pass is restarted for the copy: Note [Restarted
   * passes]). Commands run in order, so one buffer serves every dispatch. It is 16 bytes outside the budget.
   */
  #indirectArguments(): GPUBuffer {
    this.#indirect ??= this.#real.createBuffer({ size: 16, usage: INDIRECT | BufferUsage.COPY_DST, label: 'stowage indirect arguments' });
    return this.#indirect;
  }

  /**
   * Note [New ranges read zeros]: a new GPUBuffer reads zeros, and programs rely on it; a range may hold a freed
   * buffer's bytes. So every new range is cleared, by one command buffer of clears submitted before the program's
   * next submit (in the same submit) or next writeBuffer.
   */
  #clearsCommandBuffer(): GPUCommandBuffer | undefined {
    if (this.#pendingClears.size === 0) return undefined;
    const encoder = this.#real.createCommandEncoder({ label: 'stowage clears' });
    for (const range of this.#pendingClears) if (range.ptr !== undefined) encoder.clearBuffer(range.segment, range.offset, range.clearBytes);
    this.#pendingClears.clear();
    return encoder.finish();
  }

  #submit(commandBuffers: Iterable<GPUCommandBuffer>): undefined {
    const list = Array.from(commandBuffers);
    const clears = this.#clearsCommandBuffer();
    this.#queue.submit(clears ? [clears, ...list] : list);
    for (const cb of list) {
      const uses = this.#useSets.get(cb);
      if (uses) this.pager.close(uses);
    }
    const done = list.map((cb) => this.#temporaries.get(cb)).filter((t): t is Temporaries => t !== undefined);
    if (done.length > 0) {
      // Note [Frees after their submit]: the command buffers that used them are submitted; queue order protects them.
      this.buffers.freeingSubmitted(() => {
        for (const t of done) for (const ptr of t.pointers) if (!ptr.isReleased) this.buffers.free(ptr);
      });
      for (const cb of list) this.#temporaries.delete(cb);
    }
    return undefined;
  }

  #writeBuffer(buffer: GPUBuffer, bufferOffset: number, data: GPUAllowSharedBufferSource, dataOffset?: number, size?: number): undefined {
    const clears = this.#clearsCommandBuffer();
    if (clears) this.#queue.submit([clears]);
    const shared = sharedBytes(data, dataOffset, size);
    const range = this.#ranges.get(buffer);
    const whole = range !== undefined && bufferOffset === 0 && writtenBytes(data, dataOffset, size) >= range.size;
    const target = this.#place(buffer, undefined, true, whole);
    const offset = target.offset + bufferOffset;
    if (shared) this.#queue.writeBuffer(target.buffer, offset, shared);
    else if (dataOffset === undefined) this.#queue.writeBuffer(target.buffer, offset, data as GPUAllowSharedBufferSource);
    else this.#queue.writeBuffer(target.buffer, offset, data as GPUAllowSharedBufferSource, dataOffset, size);
    return undefined;
  }

  /**
   * Note [Aliased bindings] (measure 2 of issue 36): with every storage binding writable (Note [Storage bindings are
   * all writable]), a range bound twice in one bind group (ONNX `Mul(x, x)`, `Concat(x, x)`) would be two writable
   * bindings of overlapping ranges, which WebGPU refuses. The second is bound to a scratch range instead, and
   * every dispatch with the bind group first copies the range into it (the pass is ended for the copy and begun
   * again, its pipeline and bind groups restored: Note [Restarted passes]). Only within one bind group: the same
   * range in two bind groups of one dispatch is not handled yet.
   */
  #createBindGroup(descriptor: GPUBindGroupDescriptor): GPUBindGroup {
    const ranges: Range[] = [];
    const group = this.#makeBindGroup(descriptor, ranges);
    if (this.pager.enabled && ranges.length > 0) this.#groups.set(group, { descriptor, ranges, generations: ranges.map((r) => r.generation), current: group });
    return group;
  }

  /**
   * Note [Bind groups after a move]: a real bind group binds a range's place when it was made; paging may move the
   * range since (Note [Paging between runs]). So where a bind group is set, its ranges are made resident, and when
   * one of them moved since the group was made, the group is made again from its descriptor (with its alias copies)
   * and that one is set. Only compute passes do this: a render pass or bundle binding a range that moved would read
   * its old place (paging is for compute programs).
   */
  #currentGroup(group: GPUBindGroup, uses: UseSet): GPUBindGroup {
    const record = this.#groups.get(group);
    if (record === undefined) return group;
    for (const range of record.ranges) uses.ranges.add(range); // held together: a page-in for one never pages out another
    for (const range of record.ranges) this.pager.use(range, uses, true);
    if (record.ranges.every((r, i) => r.generation === record.generations[i])) return record.current;
    record.current = this.#makeBindGroup(record.descriptor, []);
    record.generations = record.ranges.map((r) => r.generation);
    this.pager.counts.rebuiltBindGroups++;
    return record.current;
  }

  /** The real bind group of `descriptor`, its ranges translated (and made resident); `ranges` receives them. */
  #makeBindGroup(descriptor: GPUBindGroupDescriptor, ranges: Range[]): GPUBindGroup {
    const entries = Array.from(descriptor.entries);
    // The group's ranges stay resident while it is made (a page-in for one must not page out another).
    const making = this.pager.open();
    let translated: GPUBindGroupEntry[] | undefined;
    const bound: { buffer: GPUBuffer; start: number; end: number }[] = [];
    const copies: AliasCopy[] = [];
    try {
      entries.forEach((entry, i) => {
        const resource = entry.resource as GPUBindingResource | GPUBuffer;
        const binding = this.#ranges.has(resource as object) ? { buffer: resource as GPUBuffer } : (resource as GPUBufferBinding);
        const range = typeof binding === 'object' && binding !== null && 'buffer' in binding ? this.#ranges.get(binding.buffer) : undefined;
        if (!range) return;
        this.pager.use(range, making, false);
        ranges.push(range);
        const offset = binding.offset ?? 0;
        const size = binding.size ?? range.size - offset;
        const start = range.offset + offset;
        let target = { buffer: range.segment, offset: start };
        if (bound.some((b) => b.buffer === range.segment && b.start < start + size && start < b.end)) {
          const ptr = this.#allocateScratch(size);
          const scratch = this.buffers.bindingOf(ptr);
          copies.push({ ptr, source: range.segment, sourceOffset: start, target: scratch.buffer, targetOffset: scratch.offset, bytes: roundUp4(size) });
          target = { buffer: scratch.buffer, offset: scratch.offset };
          this.counts.aliasCopies++;
        } else {
          bound.push({ buffer: range.segment, start, end: start + size });
        }
        translated ??= entries.slice();
        translated[i] = { ...entry, resource: { buffer: target.buffer, offset: target.offset, size } };
      });
    } finally {
      this.pager.close(making);
    }
    const group = this.#real.createBindGroup(translated ? { ...descriptor, entries: translated } : descriptor);
    if (copies.length > 0) {
      this.#aliasCopies.set(group, copies);
      this.#collectedGroups.register(group, copies.map((c) => c.ptr));
    }
    return group;
  }

  #encoder(real: GPUCommandEncoder): GPUCommandEncoder {
    const temporaries: Temporaries = { pointers: [], kept: [] };
    const uses = this.pager.open();
    const at = (buffer: GPUBuffer, offset: number, writes: boolean) => {
      const b = this.#place(buffer, uses, writes);
      return { buffer: b.buffer, offset: b.offset + offset };
    };
    return passThrough(real, {
      copyBufferToBuffer: (...args: unknown[]) => {
        // Both forms: (src, srcOffset, dst, dstOffset, size?) and (src, dst, size?).
        const [source, sourceOffset, destination, destinationOffset, size] =
          typeof args[1] === 'number' ? (args as [GPUBuffer, number, GPUBuffer, number, number?]) : [args[0] as GPUBuffer, 0, args[1] as GPUBuffer, 0, args[2] as number | undefined];
        const bytes = size ?? source.size - sourceOffset;
        const s = at(source, sourceOffset, false);
        const d = at(destination, destinationOffset, true);
        // Note [Copies within a segment] (measure 3 of issue 36): WebGPU refuses a copy whose source and destination
        // are one buffer even for disjoint ranges; two ranges of one segment copy through a scratch range.
        if (s.buffer === d.buffer && source !== destination) {
          const scratch = this.#scratch(bytes, temporaries);
          real.copyBufferToBuffer(s.buffer, s.offset, scratch.buffer, scratch.offset, bytes);
          real.copyBufferToBuffer(scratch.buffer, scratch.offset, d.buffer, d.offset, bytes);
        } else {
          real.copyBufferToBuffer(s.buffer, s.offset, d.buffer, d.offset, bytes);
        }
      },
      clearBuffer: (buffer: GPUBuffer, offset = 0, size?: number) => {
        const b = at(buffer, offset, true);
        real.clearBuffer(b.buffer, b.offset, size ?? buffer.size - offset);
      },
      resolveQuerySet: (querySet: GPUQuerySet, first: number, count: number, destination: GPUBuffer, destinationOffset: number) => {
        const d = at(destination, destinationOffset, true);
        real.resolveQuerySet(querySet, first, count, d.buffer, d.offset);
      },
      copyBufferToTexture: (source: GPUTexelCopyBufferInfo, destination: GPUTexelCopyTextureInfo, size: GPUExtent3DStrict) => {
        const b = at(source.buffer, source.offset ?? 0, false);
        real.copyBufferToTexture({ ...source, ...b }, destination, size);
      },
      copyTextureToBuffer: (source: GPUTexelCopyTextureInfo, destination: GPUTexelCopyBufferInfo, size: GPUExtent3DStrict) => {
        const b = at(destination.buffer, destination.offset ?? 0, true);
        real.copyTextureToBuffer(source, { ...destination, ...b }, size);
      },
      beginComputePass: (descriptor?: GPUComputePassDescriptor) => this.#computePass(real, descriptor, temporaries, uses),
      finish: (descriptor?: GPUCommandBufferDescriptor) => {
        const commandBuffer = real.finish(descriptor);
        if (this.pager.enabled) this.#useSets.set(commandBuffer, uses);
        if (temporaries.pointers.length > 0 || temporaries.kept.length > 0) this.#temporaries.set(commandBuffer, temporaries);
        return commandBuffer;
      },
    });
  }

  /**
   * Note [Restarted passes]: a dispatch whose bind groups hold alias copies (Note [Aliased bindings]) ends the pass,
   * copies, and begins a new one with the same label, then sets the pipeline, the bind groups and the open debug
   * groups again. The restarted pass has no timestamp writes (they would be written twice).
   */
  #computePass(encoder: GPUCommandEncoder, descriptor: GPUComputePassDescriptor | undefined, temporaries: Temporaries, uses: UseSet): GPUComputePassEncoder {
    let real = encoder.beginComputePass(descriptor);
    let pipeline: GPUComputePipeline | undefined;
    const groups: (unknown[] | undefined)[] = [];
    const debugGroups: string[] = [];
    const copyAliases = (indirect?: { buffer: GPUBuffer; offset: number }) => {
      const copies = groups.flatMap((args) => (args ? (this.#aliasCopies.get(args[1] as GPUBindGroup) ?? []) : []));
      if (copies.length === 0 && indirect === undefined) return;
      for (let i = debugGroups.length; i > 0; i--) real.popDebugGroup();
      real.end();
      for (const c of copies) encoder.copyBufferToBuffer(c.source, c.sourceOffset, c.target, c.targetOffset, c.bytes);
      if (indirect) encoder.copyBufferToBuffer(indirect.buffer, indirect.offset, this.#indirectArguments(), 0, INDIRECT_BYTES);
      for (const args of groups) if (args) temporaries.kept.push(args[1]);
      real = encoder.beginComputePass(descriptor?.label === undefined ? {} : { label: descriptor.label });
      for (const label of debugGroups) real.pushDebugGroup(label);
      if (pipeline) real.setPipeline(pipeline);
      groups.forEach((args) => args && (real.setBindGroup as (...a: unknown[]) => void)(...args));
    };
    const pass: Record<string, unknown> = {
      setPipeline: (p: GPUComputePipeline) => {
        pipeline = p;
        real.setPipeline(p);
      },
      setBindGroup: (...given: unknown[]) => {
        // Note [Bind groups after a move]: the group set is the one of its ranges' places now.
        const args = given[1] === null || given[1] === undefined ? given : [given[0], this.#currentGroup(given[1] as GPUBindGroup, uses), ...given.slice(2)];
        groups[args[0] as number] = args[1] === null ? undefined : args;
        (real.setBindGroup as (...a: unknown[]) => void)(...args);
      },
      dispatchWorkgroups: (x: number, y?: number, z?: number) => {
        copyAliases();
        real.dispatchWorkgroups(x, y, z);
      },
      dispatchWorkgroupsIndirect: (buffer: GPUBuffer, offset: number) => {
        const range = this.#ranges.get(buffer);
        if (range !== undefined) this.pager.use(range, uses, false);
        if (range === undefined) {
          copyAliases();
          real.dispatchWorkgroupsIndirect(buffer, offset);
          return;
        }
        copyAliases({ buffer: range.segment, offset: range.offset + offset });
        this.counts.indirectCopies++;
        real.dispatchWorkgroupsIndirect(this.#indirectArguments(), 0);
      },
      pushDebugGroup: (label: string) => {
        debugGroups.push(label);
        real.pushDebugGroup(label);
      },
      popDebugGroup: () => {
        debugGroups.pop();
        real.popDebugGroup();
      },
      insertDebugMarker: (label: string) => real.insertDebugMarker(label),
      end: () => real.end(),
    };
    const first = real;
    return new Proxy(first, {
      get: (_, key) => (Object.hasOwn(pass, key) ? pass[key as string] : Reflect.get(real, key, real)),
      set: (_, key, value) => Reflect.set(real, key, value, real),
    });
  }
}

/** The usage a segment has (KIND_FLAGS of the storage kind): a buffer asking for more is the real device's, but for INDIRECT. */
const SEGMENT_USAGE = BufferUsage.STORAGE | BufferUsage.COPY_SRC | BufferUsage.COPY_DST;
/** GPUBufferUsage.INDIRECT: served from a segment, its arguments copied out (Note [Indirect arguments]). */
const INDIRECT = 0x0100;
/** Bytes of a dispatchWorkgroupsIndirect's arguments (three u32). */
const INDIRECT_BYTES = 12;

/** A bind group's descriptor and the places of its ranges when its real group was made (Note [Bind groups after a move]). */
interface GroupRecord {
  readonly descriptor: GPUBindGroupDescriptor;
  readonly ranges: readonly Range[];
  /** Each range's generation when `current` was made. */
  generations: number[];
  /** The real bind group binding the ranges' places now. */
  current: GPUBindGroup;
}

interface AliasCopy {
  readonly ptr: DataPtr<GPUBuffer>;
  readonly source: GPUBuffer;
  readonly sourceOffset: number;
  readonly target: GPUBuffer;
  readonly targetOffset: number;
  readonly bytes: number;
}

interface Temporaries {
  /** Scratch pointers, freed after the submit. */
  readonly pointers: DataPtr<GPUBuffer>[];
  /** Bind groups with alias copies used by the command buffer: alive (and their scratch with them) until its submit. */
  readonly kept: unknown[];
}

/** Bytes a `writeBuffer(buffer, offset, data, dataOffset, size)` writes (offset and size in elements of a typed array). */
function writtenBytes(data: GPUAllowSharedBufferSource, dataOffset = 0, size?: number): number {
  if (ArrayBuffer.isView(data)) {
    const elementBytes = (data as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
    return (size ?? data.byteLength / elementBytes - dataOffset) * elementBytes;
  }
  return size ?? (data as ArrayBuffer).byteLength - dataOffset;
}

function roundUp4(bytes: number): number {
  return Math.max(4, Math.ceil(bytes / 4) * 4);
}

/**
 * A proxy of a WebGPU object: `overrides` answer their keys, every other member is the object's own (methods bound
 * to it, accessors read and set on it: native methods refuse a proxy as `this`). `instanceof` sees the object's
 * prototype.
 */
function passThrough<T extends object>(target: T, overrides: Record<string, unknown>): T {
  const bound = new Map<PropertyKey, { from: unknown; fn: unknown }>();
  return new Proxy(target, {
    get(object, key) {
      if (Object.hasOwn(overrides, key)) return overrides[key as string];
      const value: unknown = Reflect.get(object, key, object);
      if (typeof value !== 'function') return value;
      let cached = bound.get(key);
      if (cached?.from !== value) bound.set(key, (cached = { from: value, fn: (value as (...a: unknown[]) => unknown).bind(object) }));
      return cached.fn;
    },
    set(object, key, value) {
      return Reflect.set(object, key, value, object);
    },
  });
}

/**
 * Note [Shared memory uploads] (measure 4 of issue 36): dawn.node refuses `writeBuffer` from a view of a
 * SharedArrayBuffer, which threaded WebAssembly builds (onnxruntime-web's) pass; such data is copied first.
 * Returns the bytes to write, copied, or undefined when `data` is not shared memory.
 */
function sharedBytes(data: GPUAllowSharedBufferSource, dataOffset = 0, size?: number): Uint8Array | undefined {
  if (typeof SharedArrayBuffer === 'undefined') return undefined;
  const view = ArrayBuffer.isView(data) ? data : undefined;
  const backing = view ? view.buffer : data;
  if (!(backing instanceof SharedArrayBuffer)) return undefined;
  const elementBytes = view ? ((view as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1) : 1;
  const base = view ? view.byteOffset : 0;
  const length = (view ? view.byteLength : (data as SharedArrayBuffer).byteLength) / elementBytes;
  const start = base + dataOffset * elementBytes;
  const bytes = (size ?? length - dataOffset) * elementBytes;
  return new Uint8Array(backing, start, bytes).slice();
}
