import { threadId } from 'node:worker_threads';

import { DisposedError, formatDevice, InvalidArgumentError, Runtime, StorageImpl, TensorImpl, UseAfterReleaseError } from '@stowage/core';
import { checkOptions, resolveAll } from '@stowage/core/plugin-kit';

import type { ReceivedStorage } from './consumer/ReceivedStorage.js';
import { ipcOf } from './ipc.js';
import type { Ipc } from './IpcService.js';
import type { SharedMemoryBackend } from './shm/SharedMemoryBackend.js';
import { SharedMemoryBackendToken } from './shm/SharedMemoryBackend.js';
import { cudaIpcAllocatorOf } from './wire/CudaIpcAllocator.js';
import type { QueueChannel, QueueTransport } from './wire/QueueChannel.js';
import { queueChannel } from './wire/QueueChannel.js';
import type { QueueMessage } from './wire/QueueMessage.js';
import { descriptorOf, isAckMessage, isCloseMessage, isHelloMessage, isQueueMessage } from './wire/QueueMessage.js';
import type { CudaMemory, SabMemory, ShmMemory, StorageDescriptor } from './wire/StorageDescriptor.js';

/** The `code` of the warning emitted when storages put on a queue were never sent: its transport closed first. */
export const UNSENT_WARNING_CODE = 'STOWAGE_IPC_UNSENT';

/** The most descriptors one message carries (Note [Batched puts]); a stream frame of this many stays far under 1 MiB. */
const MAX_BATCH = 256;

/** Options of {@link StorageQueue}. */
export interface StorageQueueOptions {
  /**
   * Whether puts are batched (Note [Batched puts]). Default: true on a MessagePort or a stream, which the queue
   * owns; false on a process channel, which other code shares: there a message the program sends right after a put
   * would otherwise arrive before it. With `batch: true` on a process channel, call {@link StorageQueue.flush}
   * before sending anything that must arrive after the puts.
   */
  readonly batch?: boolean;
}

interface Waiter {
  resolve(value: ReceivedStorage | undefined): void;
  reject(error: unknown): void;
}

/**
 * One end of a queue of storages, `put` on one end, `get` on the other, over
 * - a `MessagePort` between worker threads (`new MessageChannel()`, one port to each side): storages in a
 *   SharedArrayBuffer (`cpu({ shared: true })`, or `rt.storage(n, { shared: true })`) or in POSIX shared memory
 *   (`sharedMemoryCpu()`) cross zero copy;
 * - a child process's IPC channel (`fork(file, { serialization: 'advanced' })`: the ChildProcess on the parent's
 *   side, `process` on the child's): storages in POSIX shared memory (`sharedMemoryCpu()`) cross zero copy.
 *   Messages on the channel that are not the queue's are left to the channel's other listeners. CUDA storages
 *   cross too (Note [CUDA over IPC] in consumer/Receiver.ts);
 * - any byte stream the user supplies (`stream.Duplex`: a `net.Socket` between processes, a child's stdio):
 *   length-prefixed JSON frames (Note [Stream frames] in wire/QueueChannel.ts); the same memory as a process channel.
 *   The queue owns the stream: `close()` ends it.
 *
 * - `put(storage | tensor)`: one send (`Ipc#send`: ownership of the DataPtr, a fresh counter slot at count 1) and
 *   a descriptor posted on the port (batched: Note [Batched puts]). The producer keeps using and releasing its
 *   storage as usual; released while a consumer holds it, the memory waits in its limbo.
 * - `get()`: the next descriptor, checked, as a {@link ReceivedStorage} (its slot acquired). A message that is not
 *   a good descriptor rejects that `get()` with a typed error; the next `get()` takes the next message.
 * - `for await (const r of queue)` gets until the other end closes (an error ends the loop: call `get()` again).
 * - `close()` tells the other end, closes the port, rejects pending `get()`s with DisposedError and gives back the
 *   references of descriptors that arrived and were never got.
 *
 * A port is referenced (keeps the thread alive) only while a `get()` waits; a process channel stays referenced by
 * the queue's listener until `close()`.
 *
 * Note [Batched puts]: a message costs more than a send — structured cloning and a 'message' event on a port, a
 * serialized frame on a process channel (about 50 µs a round trip either way), while a send is a counter increment.
 * So, batching, `put` adds the descriptor to an outbox, and the outbox goes as one `ipc.storages` message at the
 * end of the current task's microtasks, or as soon as it holds {@link MAX_BATCH} descriptors: a single put is posted
 * before any other task runs (no added latency), and puts in a loop cost one message per 256. The queue's own
 * messages (close, ack) post the outbox first. What batching gives up is the order against messages that other
 * code sends on the same transport between a put and the flush: nothing else may post on a queue's port or stream,
 * but a process channel is shared — there batching is off unless asked for (`{ batch: true }`, then `flush()` before
 * a message that must follow the puts). A transport that closes between a put and its post (a put on a closed
 * transport throws) cannot carry the outbox: the references are given back, so the producer frees as if the
 * storages were never put, and a warning ({@link UNSENT_WARNING_CODE}) says how many.
 *
 * Invariants: waiters.length > 0 ⇒ inbox is empty; after close, inbox, waiters and outbox are empty; the outbox is
 * not empty ⇒ a flush is queued.
 */
export class StorageQueue implements AsyncIterable<ReceivedStorage>, Disposable {
  readonly #rt: Runtime;
  readonly #ipc: Ipc;
  readonly #port: QueueChannel;
  readonly #inbox: unknown[] = [];
  readonly #waiters: Waiter[] = [];
  #outbox: StorageDescriptor[] = [];
  readonly #batch: boolean;
  #backends: readonly SharedMemoryBackend[] | undefined;
  #closed = false;
  #remoteClosed = false;
  readonly #onMessage = (message: unknown): void => this.#arrived(message);
  readonly #onClose = (): void => this.#remoteEnded();

  /**
   * @param rt the runtime whose IPC sends (its `ipc()` plugin) and whose host allocator wraps received memory
   * @param transport one end of a MessageChannel (the other end goes to the other thread, to its own
   *   StorageQueue), a ChildProcess forked with an IPC channel and `serialization: 'advanced'`, in such a
   *   child `process`, or a `stream.Duplex` connected to the other end's
   * @throws InvalidArgumentError when `rt` has no `ipc()` plugin, `transport` is none of those, `options` is not an
   *   options object (or has a key other than `batch`), or `options.batch` is not a boolean
   */
  constructor(rt: Runtime, transport: QueueTransport, options: StorageQueueOptions = {}) {
    if (!(rt instanceof Runtime)) throw new InvalidArgumentError('rt', rt, 'a Runtime created with the ipc() plugin');
    const { batch } = checkOptions<StorageQueueOptions>('options', options, ['batch']);
    if (batch !== undefined && typeof batch !== 'boolean') throw new InvalidArgumentError('options.batch', batch, 'true, false or nothing');
    this.#port = queueChannel(transport);
    this.#batch = batch ?? this.#port.exclusive;
    this.#rt = rt;
    this.#ipc = ipcOf(rt);
    this.#port.listen(this.#onMessage, this.#onClose);
    this.#port.unref();
    if (!this.#port.crossesProcesses) {
      // Note [Dead consumers] (producer/ThreadLiveness.ts): the other thread learns when this one ends.
      const alive = this.#ipc.livenessPort();
      this.#port.post({ stowage: 'ipc.hello', pid: process.pid, threadId, alive } satisfies QueueMessage, [alive]);
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Sends `item` (a storage, or a tensor with its layout) to the other end; returns the descriptor posted.
   * @throws InvalidArgumentError for a storage that is not in a SharedArrayBuffer (make it with
   *   `cpu({ shared: true })` or `{ shared: true }`), on a device other than the host, received from another
   *   thread (copy it first), or what `Ipc#send` refuses; UseAfterReleaseError for a released one; DisposedError
   *   after close, once the other end closed, or when the transport is closed
   */
  put(item: StorageImpl | TensorImpl): StorageDescriptor {
    if (this.#closed) throw new DisposedError('StorageQueue.put() was called after close().');
    if (this.#remoteClosed) throw new DisposedError('StorageQueue.put(): the other end closed the queue; nothing put now would be got.');
    if (!this.#port.isOpen()) throw new DisposedError('StorageQueue.put(): the transport of the queue is closed (a disconnected channel or an ended stream).');
    const tensor = item instanceof TensorImpl ? item : null;
    const storage = tensor?.storage ?? item;
    if (!(storage instanceof StorageImpl)) throw new InvalidArgumentError('item', item, 'a StorageImpl or a TensorImpl');
    if (storage.isReleased) throw new UseAfterReleaseError('Cannot put a released storage.');
    const ptr = storage.peekDataPtr();
    const layout = tensor === null ? {} : { tensor: { dtype: tensor.dtype, sizes: [...tensor.sizes], strides: [...tensor.strides], storageOffset: tensor.storageOffset } };
    let descriptor: StorageDescriptor;
    if (ptr.device.type === 'cuda') {
      descriptor = { ...this.#putCuda(storage), byteLength: ptr.byteLength, ...layout, producer: { pid: process.pid, threadId } };
    } else {
      if (ptr.device.type !== 'cpu') {
        throw new InvalidArgumentError(
          'item',
          `a storage on ${formatDevice(ptr.device)}`,
          `a host or CUDA storage: ${ptr.device.type} memory cannot cross a device boundary to another thread or process (it has no IPC export; WebGPU buffers belong to their GPUDevice); copy it into a host storage first`,
        );
      }
      const memory = this.#memoryOf(ptr.handle, ptr.byteOffset);
      const slot = this.#ipc.send(storage); // throws for a received, COW or LMS storage; nothing sent then
      descriptor = { device: 'cpu:0', memory, byteLength: ptr.byteLength, ...layout, slot, producer: { pid: process.pid, threadId } };
    }
    this.#outbox.push(descriptor);
    if (!this.#batch || this.#outbox.length >= MAX_BATCH) this.flush();
    else if (this.#outbox.length === 1) queueMicrotask(() => this.flush());
    return descriptor;
  }

  /**
   * Posts the puts not yet posted now, as one message (Note [Batched puts]); a batching queue does it by itself at
   * the end of the current task's microtasks. Nothing to do without batching.
   */
  flush(): void {
    if (this.#outbox.length === 0) return;
    const descriptors = this.#outbox;
    this.#outbox = [];
    try {
      if (this.#remoteClosed) throw new DisposedError('the other end closed the queue');
      this.#port.post(descriptors.length === 1 ? { stowage: 'ipc.storage', descriptor: descriptors[0]! } : { stowage: 'ipc.storages', descriptors } satisfies QueueMessage);
    } catch (error) {
      this.#giveBack(descriptors);
      if (!this.#batch) throw error; // put() throws, as it always did unbatched
      process.emitWarning(`${descriptors.length} storage(s) put on a StorageQueue were never sent (${(error as Error).message}); their references were given back.`, {
        type: 'StowageIpcWarning',
        code: UNSENT_WARNING_CODE,
      });
    }
  }

  /**
   * The next storage from the other end.
   * @throws (as a rejected promise) InvalidArgumentError for a message that is not a StorageQueue descriptor, a
   *   malformed one, one received twice, a slot out of range, or one put by this same thread (get in another
   *   thread than put: its reference is given back); ForeignPointerError for a forged nonce; UseAfterReleaseError
   *   for a slot its producer is done with; SharedMemoryError (DEVICE_ERROR) when its counter file is gone;
   *   DisposedError after close, or once the other end closed and every message was got
   */
  get(): Promise<ReceivedStorage> {
    return this.#next().then((r) => r ?? Promise.reject(new DisposedError('StorageQueue.get(): the other end closed the queue and every storage was got.')));
  }

  /**
   * Gets until the other end closes. A plain iterator, not an async generator: one promise a storage instead of a
   * generator's several (the consumer's cost per storage is what bounds a queue's rate).
   */
  [Symbol.asyncIterator](): AsyncIterator<ReceivedStorage> {
    let done = false;
    return {
      next: (): Promise<IteratorResult<ReceivedStorage>> => {
        if (done) return Promise.resolve({ done: true, value: undefined });
        return this.#next().then(
          (r): IteratorResult<ReceivedStorage> => {
            if (r !== undefined) return { done: false, value: r };
            done = true;
            return { done: true, value: undefined };
          },
          (error: unknown) => {
            done = true;
            throw error;
          },
        );
      },
      return: (): Promise<IteratorResult<ReceivedStorage>> => {
        done = true;
        return Promise.resolve({ done: true, value: undefined });
      },
    };
  }

  /** Closes this end (idempotent): see the class comment. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.flush();
    try {
      if (!this.#remoteClosed) this.#port.post({ stowage: 'ipc.close' } satisfies QueueMessage);
    } catch {
      // The port is already closed.
    }
    this.#port.unlisten();
    this.#port.unref();
    this.#port.close();
    for (const message of this.#inbox.splice(0)) this.#drop(message);
    for (const w of this.#waiters.splice(0)) w.reject(new DisposedError('StorageQueue.get() was pending when the queue was closed.'));
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /** Gives back the references of descriptors that were never sent: the counts go back to 0. */
  #giveBack(descriptors: readonly StorageDescriptor[]): void {
    for (const d of descriptors) {
      this.#ipc.dropReference(d.slot);
      this.#ipc.exportTaken(d.slot);
    }
  }

  #next(): Promise<ReceivedStorage | undefined> {
    if (this.#closed) return Promise.reject(new DisposedError('StorageQueue.get() was called after close().'));
    if (this.#inbox.length > 0) return this.#settle(this.#inbox.shift());
    if (this.#remoteClosed) return Promise.resolve(undefined);
    return new Promise((resolve, reject) => {
      this.#waiters.push({ resolve, reject });
      this.#port.ref();
    });
  }

  #arrived(message: unknown): void {
    if (!this.#port.exclusive && !isQueueMessage(message)) return; // the channel's other users'
    if (isCloseMessage(message)) return this.#remoteEnded();
    if (isAckMessage(message)) {
      this.#ipc.exportTaken(message);
      return;
    }
    if (isHelloMessage(message)) {
      if (message.pid === process.pid && message.threadId !== threadId) this.#ipc.watchThread(message.threadId, message.alive);
      else message.alive.close();
      return;
    }
    const batch = (message as { stowage?: unknown; descriptors?: unknown } | null)?.stowage === 'ipc.storages' ? (message as { descriptors: unknown }).descriptors : undefined;
    if (Array.isArray(batch)) {
      for (const descriptor of batch) this.#arrivedOne({ stowage: 'ipc.storage', descriptor });
      return;
    }
    this.#arrivedOne(message);
  }

  /** One storage message (or a message that is none, which rejects one get()). */
  #arrivedOne(message: unknown): void {
    const waiter = this.#waiters.shift();
    if (waiter === undefined) {
      this.#inbox.push(message);
      return;
    }
    if (this.#waiters.length === 0) this.#port.unref();
    this.#settle(message).then(waiter.resolve, waiter.reject);
  }

  #remoteEnded(): void {
    this.#remoteClosed = true;
    this.#port.unref();
    for (const w of this.#waiters.splice(0)) w.resolve(undefined);
  }

  /** Turns one message into a received storage (or a typed error). */
  #settle(message: unknown): Promise<ReceivedStorage> {
    try {
      return Promise.resolve(this.#receive(message));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #receive(message: unknown): ReceivedStorage {
    const descriptor = descriptorOf(message);
    if (descriptor.producer.pid === process.pid && descriptor.producer.threadId === threadId) {
      this.#ipc.dropReference(descriptor.slot);
      throw new InvalidArgumentError(
        'queue',
        `a storage put by this same thread (thread ${threadId} of process ${process.pid})`,
        'get() in another thread than put(): a queue carries storages between threads (its reference was given back, so the producer can free it)',
      );
    }
    if (descriptor.memory.kind !== 'cuda' || descriptor.memory.exported.kind !== 'shareable') return this.#ipc.receive(this.#rt, descriptor);
    try {
      return this.#ipc.receive(this.#rt, descriptor);
    } finally {
      // Note [CUDA over IPC]: the descriptors were taken (or never will be); the producer may close its copies.
      try {
        this.flush();
        this.#port.post({ stowage: 'ipc.ack', file: descriptor.slot.file, slot: descriptor.slot.slot } satisfies QueueMessage);
      } catch {
        // The producer is gone: its descriptors went with it.
      }
    }
  }

  /** Exports a CUDA storage (Note [CUDA over IPC] in consumer/Receiver.ts): processes only. */
  #putCuda(storage: StorageImpl): Pick<StorageDescriptor, 'device' | 'memory' | 'slot'> {
    const device = storage.peekDataPtr().device;
    if (!this.#port.crossesProcesses) {
      throw new InvalidArgumentError(
        'item',
        `a ${formatDevice(device)} storage on a queue between threads`,
        'a host storage: threads of one process share one CUDA context, where a CUDA IPC handle cannot be opened; CUDA storages cross between processes (a child process channel or a stream)',
      );
    }
    const exporter = cudaIpcAllocatorOf(this.#rt, device);
    if (exporter === undefined) {
      throw new InvalidArgumentError('item', `a ${formatDevice(device)} storage whose device offers no IpcExporter service`, "a CUDA storage of allocator-cuda's cuda() plugin");
    }
    const { slot, exported } = this.#ipc.sendCuda(storage, exporter);
    const memory: CudaMemory = { kind: 'cuda', exported: exported.kind === 'legacy' ? { ...exported, handle: Uint8Array.from(exported.handle) } : exported, byteOffset: 0 };
    return { device: formatDevice(device), memory, slot };
  }

  /**
   * The descriptor memory of a segment handle: a SharedArrayBuffer range (worker ports only) or a
   * `sharedMemoryCpu()` segment (any transport).
   * @throws InvalidArgumentError for memory that cannot cross this transport, saying how to allocate it
   */
  #memoryOf(handle: unknown, byteOffset: number): SabMemory | ShmMemory {
    for (const backend of this.#sharedMemoryBackends()) {
      const object = backend.objectOf(handle);
      if (object !== undefined) return { kind: 'shm', name: object.name, inode: object.inode, byteOffset };
    }
    if (handle instanceof SharedArrayBuffer && !this.#port.crossesProcesses) return { kind: 'sab', buffer: handle, byteOffset };
    if (this.#port.crossesProcesses) {
      throw new InvalidArgumentError(
        'item',
        `a storage whose memory is ${handle instanceof SharedArrayBuffer ? 'a SharedArrayBuffer (shared between threads only)' : 'an ArrayBuffer (not shared)'}`,
        'a storage in POSIX shared memory, so that it crosses to another process without a copy: create the runtime with sharedMemoryCpu() from @stowage/ipc',
      );
    }
    throw new InvalidArgumentError(
      'item',
      'a storage of a non-shared allocator (its memory is an ArrayBuffer)',
      'a storage in shared memory, so that it crosses without a copy: create the runtime with cpu({ shared: true }) (or sharedMemoryCpu()), or the storage with rt.storage(n, { shared: true }) (or rt.tensor(sizes, { shared: true }))',
    );
  }

  /** The runtime's `sharedMemoryCpu()` backends (resolved once: a put asks for every storage). */
  #sharedMemoryBackends(): readonly SharedMemoryBackend[] {
    if (this.#backends === undefined) {
      const container = this.#rt.container;
      this.#backends = container.isRegistered(SharedMemoryBackendToken, true) ? resolveAll(container, SharedMemoryBackendToken) : [];
    }
    return this.#backends;
  }

  /** Gives back the reference of a message that will never be got. */
  #drop(message: unknown): void {
    try {
      this.#ipc.dropReference(descriptorOf(message).slot);
    } catch {
      // Not a descriptor: nothing to give back.
    }
  }
}
