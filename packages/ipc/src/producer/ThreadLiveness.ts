import { MessageChannel } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';

// Note [Dead consumers]
// A consumer that dies holding references must not pin the producer's memory forever (PyTorch: pytorch#19904).
// Each counter slot records its holder (pid, threadId). The Sender's `collect()` runs `RefCounterFiles#reclaimDead`
// with the worker threads known to have ended, and the runtime's IPC runs a timer (unref'd: it never keeps the
// process alive) that collects every `deadCheckIntervalMs` while the limbo is not empty, so the memory of a consumer
// that died comes back within about a second without any call from the program. Processes are checked with
// `kill(pid, 0)`. Threads of this process cannot be probed: each StorageQueue over a MessagePort sends the other end
// a *liveness port* (one end of a fresh MessageChannel whose other end the sender's IPC keeps, unref'd, and never
// closes), and the receiving end's IPC takes the sender's threadId as ended when that port's 'close' arrives (the
// thread's ports close with it). The liveness ports are never closed explicitly (not even by dispose): two runtimes
// in one thread would otherwise reclaim each other's references.

/**
 * Which worker threads of this process ended, as far as a runtime's IPC knows (Note [Dead consumers]): the ports
 * this thread hands out so that other threads learn when it ends, and the ports of other threads it watches.
 *
 * Invariants: every watched port is open and listened to; after dispose nothing is watched.
 */
export class ThreadLiveness implements Disposable {
  /** Worker threads of this process that ended (their liveness port closed, or someone said so). */
  readonly #ended = new Set<number>();
  /** Liveness ports of other threads being watched, by threadId. */
  readonly #watched = new Map<number, MessagePort>();
  /** This thread's ends of the liveness ports it handed out (kept, never closed). */
  readonly #ports: MessagePort[] = [];
  #disposed = false;

  /** The worker threads known to have ended, for `RefCounterFiles#reclaimDead`. */
  get ended(): ReadonlySet<number> {
    return this.#ended;
  }

  /**
   * A liveness port for another thread: when this thread ends, the port's other end gets 'close'. The caller
   * transfers it; this side's end stays open for the thread's life.
   */
  port(): MessagePort {
    const { port1, port2 } = new MessageChannel();
    port1.unref();
    this.#ports.push(port1);
    return port2;
  }

  /**
   * Watches another thread's liveness port: when it closes, `threadId` counts as ended and `onEnded` runs. A port
   * of a thread already watched or ended, or one that comes after dispose, is closed at once.
   */
  watch(threadId: number, port: MessagePort, onEnded: () => void): void {
    if (this.#disposed || this.#watched.has(threadId) || this.#ended.has(threadId)) {
      port.close();
      return;
    }
    this.#watched.set(threadId, port);
    port.once('close', () => {
      this.#watched.delete(threadId);
      onEnded();
    });
    port.start();
    port.unref();
  }

  /** Counts worker thread `threadId` of this process as ended. */
  markEnded(threadId: number): void {
    this.#ended.add(threadId);
  }

  /** Closes the watched ports (not this thread's own ends: Note [Dead consumers]). Idempotent. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const port of this.#watched.values()) port.close();
    this.#watched.clear();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
