import { readFileSync } from 'node:fs';

/** CPU time over an interval, in milliseconds. */
export interface CpuTimes {
  /** Time the main JavaScript thread ran on a CPU. */
  readonly mainThreadCpuMs: number;
  /** Time the main thread was ready to run but waited for a CPU (other threads had them). */
  readonly mainThreadWaitMs: number;
  /** CPU time of every thread of the process (V8's compiler and GC threads, the driver's threads, the main one). */
  readonly processCpuMs: number;
}

/** What can be measured everywhere (the process) and, on Linux, the main thread's part. */
export type MeasuredCpuTimes = Partial<CpuTimes> & Pick<CpuTimes, 'processCpuMs'>;

/**
 * Reads where a pass's time went. A pass's wall time includes the main thread waiting while other threads of the
 * process run: V8 compiling the allocator's hot functions on background threads, the GPU driver's workers (on
 * SwiftShader, ordinary CPU threads). On a 2-core machine that waiting shows up as a slower pass, so the bench
 * reports it beside ops/s. The main thread's times come from Linux's /proc/thread-self/schedstat (nanoseconds);
 * elsewhere only the process's CPU time is known and the thread's fields are absent.
 */
export class CpuClock {
  #start: { cpuNs: number; waitNs: number } | undefined;
  #startProcess: NodeJS.CpuUsage = process.cpuUsage();

  start(): void {
    this.#start = readSchedstat();
    this.#startProcess = process.cpuUsage();
  }

  /** The times since `start()`. */
  stop(): MeasuredCpuTimes {
    const process_ = process.cpuUsage(this.#startProcess);
    const processCpuMs = round((process_.user + process_.system) / 1000);
    const end = readSchedstat();
    if (this.#start === undefined || end === undefined) return { processCpuMs };
    return {
      mainThreadCpuMs: round((end.cpuNs - this.#start.cpuNs) / 1e6),
      mainThreadWaitMs: round((end.waitNs - this.#start.waitNs) / 1e6),
      processCpuMs,
    };
  }
}

/** The calling thread's on-CPU and run-queue nanoseconds, or undefined where /proc does not have them. */
function readSchedstat(): { cpuNs: number; waitNs: number } | undefined {
  try {
    const [cpu, wait] = readFileSync('/proc/thread-self/schedstat', 'utf8').split(' ');
    return { cpuNs: Number(cpu), waitNs: Number(wait) };
  } catch {
    return undefined;
  }
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
