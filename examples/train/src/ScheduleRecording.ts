import { InvalidArgumentError } from '@stowage/core';
import type { EngineStats, LinkName, LinkProfile, OperationAccess, TimelineEntry } from '@stowage/lab';
import { SimulatedDevice } from '@stowage/lab';

/** Where a device stood at a point of the host's program (an iteration's start or end). */
export interface ScheduleMark {
  /** The host's clock. */
  readonly nowNs: number;
  /** Operations enqueued so far: the length of the timeline. */
  readonly entries: number;
  readonly compute: EngineStats;
  readonly h2d: EngineStats;
  readonly d2h: EngineStats;
}

/** One step of the host's program as the device saw it. */
type Step =
  | {
      readonly kind: 'operation';
      readonly entry: TimelineEntry;
      readonly access: OperationAccess;
      /**
       * The operation whose end `access.afterNs` is (a page-in after its page-out), by index of enqueue; −1 when
       * `afterNs` is 0, −2 when it is the end of no recorded page-out (a broken precondition, refused at replay).
       */
      readonly after: number;
    }
  | { readonly kind: 'wait'; readonly operation: number }
  | { readonly kind: 'synchronize' }
  | { readonly kind: 'mark' };

/**
 * The schedule of one program on a SimulatedDevice, recorded as it runs so that it can run again on a device with
 * another link (Note [One run, several links]): every operation the device enqueues (its engine, duration, bytes
 * and what it reads, writes and waits for), every host wait (on which operation), and marks between iterations.
 *
 * Note [One run, several links]: what LMS does (which storage it reclaims, pages in, speculates on) depends on
 * the program's calls alone, never on the simulated clock: a page-out's bytes are on the host at once and its
 * `done` resolves at once, whatever the link. So the operations a run enqueues, their order, their bytes and
 * hazards, and which operation the host waits for, are the same on every link; only the copies' durations differ.
 * A replay enqueues the same operations in the same order on a fresh device of another link, a copy taking that
 * link's time and a kernel its own, a page-in waiting for the replayed page-out that produced its bytes, and the
 * host waiting for the replayed operation it waited for: the device then schedules each operation exactly as a
 * run on that link would (the start rule of SimulatedDevice.ts reads nothing else). The replay moves no bytes;
 * the ranges name the recorded run's segments, which only their identity matters for. Segments the run freed
 * are not forgotten by the replay's hazards, which changes nothing: a freed segment is never touched again.
 *
 * Preconditions: the host waits through `hostWaitFor` and `synchronize` only, never on the device directly; every
 * page-in's `afterNs` is 0 or the end of a recorded page-out (true of SimulatedPager's).
 */
export class ScheduleRecording {
  readonly device: SimulatedDevice;
  readonly #steps: Step[] = [];
  #operations = 0;
  readonly #operationOf = new Map<TimelineEntry, number>();
  /** The recorded page-outs by their end, simulated ns (one engine: no two end together, as every copy takes its latency). */
  readonly #pageOutEndingAt = new Map<number, number>();
  readonly #onEnqueued = ({ entry, access }: { readonly entry: TimelineEntry; readonly access: OperationAccess }): void => {
    const afterNs = access.afterNs ?? 0;
    const after = afterNs === 0 ? -1 : (this.#pageOutEndingAt.get(afterNs) ?? -2);
    const operation = this.#operations++;
    this.#operationOf.set(entry, operation);
    if (entry.engine === 'd2h') this.#pageOutEndingAt.set(entry.endNs, operation);
    this.#steps.push({ kind: 'operation', entry, access, after });
  };

  /** Records what `device` does from now on. */
  constructor(device: SimulatedDevice) {
    this.device = device;
    device.events.on('enqueued', this.#onEnqueued);
  }

  /** The host waits until `entry` (an operation of the device) has ended; returns the host's clock. */
  hostWaitFor(entry: TimelineEntry): number {
    const operation = this.#operationOf.get(entry);
    if (operation === undefined) throw new InvalidArgumentError('entry', entry, 'an operation this recording saw enqueued');
    this.#steps.push({ kind: 'wait', operation });
    return this.device.hostWait(entry.endNs);
  }

  /** The host waits for every operation enqueued so far; returns the host's clock. */
  synchronize(): number {
    this.#steps.push({ kind: 'synchronize' });
    return this.device.synchronize();
  }

  /** Marks a point of the program (an iteration's start or end) and returns where the device stands. */
  mark(): ScheduleMark {
    this.#steps.push({ kind: 'mark' });
    return markOf(this.device);
  }

  /** Stops recording. */
  stop(): void {
    this.device.events.off('enqueued', this.#onEnqueued);
  }

  /**
   * Runs the recorded schedule again on a new device of `link` (Note [One run, several links]) and returns it,
   * with where it stood at each mark, in order.
   * @throws InvalidArgumentError for a bad link; Error when an operation waited for something other than a
   * recorded page-out (a broken precondition)
   */
  replay(link: LinkName | LinkProfile): { readonly device: SimulatedDevice; readonly marks: readonly ScheduleMark[] } {
    const device = new SimulatedDevice({ link, memoryBytesPerSecond: this.device.memoryBytesPerSecond });
    const entries: TimelineEntry[] = [];
    const marks: ScheduleMark[] = [];
    for (const step of this.#steps) {
      if (step.kind === 'mark') marks.push(markOf(device));
      else if (step.kind === 'synchronize') device.synchronize();
      else if (step.kind === 'wait') device.hostWait(entries[step.operation]!.endNs);
      else {
        const { entry, access, after } = step;
        const isCopy = entry.engine !== 'compute' && access.bytes !== undefined;
        const durationNs = isCopy ? device.copyDurationNs(access.bytes!) : entry.endNs - entry.startNs;
        if (after === -2) throw new Error(`Cannot replay operation ${entries.length} (${entry.name}): it waited until ${access.afterNs} ns, the end of no recorded page-out.`);
        const afterNs = after === -1 ? 0 : entries[after]!.endNs;
        entries.push(device.enqueue(entry.engine, entry.name, durationNs, { ...access, afterNs }));
      }
    }
    return { device, marks };
  }
}

function markOf(device: SimulatedDevice): ScheduleMark {
  const { nowNs, compute, h2d, d2h } = device.stats;
  return { nowNs, entries: device.timeline.length, compute, h2d, d2h };
}
