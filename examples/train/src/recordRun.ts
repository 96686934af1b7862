import type { MemorySnapshot, Runtime } from '@stowage/core';
import { parseDevice, resolve } from '@stowage/core';
import { LmsController } from '@stowage/lms';
import { MemoryEventRecorder } from '@stowage/cli';

/** The hooks that record one `runUnderLms` run, and the recording once it has run. */
export interface RunRecording {
  /** For `onRuntime`: starts recording the device's allocator and LMS. */
  readonly onRuntime: (runtime: Runtime) => void;
  /** For `onStep`: after the last step, takes the snapshot and stops recording. */
  readonly onStep: (step: number) => void;
  /** The allocator's snapshot after the last step, its trace the recorded events (LMS page-outs and page-ins among them). */
  recording(): MemorySnapshot;
}

/** Records a run of `steps` steps on `device` (what `--record <file>` writes, for `stowage viz` and `stowage trace`). */
export function recordRun(device: string, steps: number): RunRecording {
  const recorder = new MemoryEventRecorder();
  let runtime: Runtime | undefined;
  let snapshot: MemorySnapshot | undefined;
  return {
    onRuntime: (rt) => {
      runtime = rt;
      recorder.attachAllocator(rt.allocator(device)); // LMS meets the device when its allocator is made
      const lmsDevice = resolve(rt.container, LmsController).device(parseDevice(device));
      if (lmsDevice !== undefined) recorder.attachLms(lmsDevice.events);
    },
    onStep: (step) => {
      if (step !== steps - 1 || runtime === undefined) return;
      snapshot = runtime.allocator(device).snapshot();
      recorder.dispose();
    },
    recording: () => {
      if (snapshot === undefined) throw new Error('recording() was called before the run finished its last step');
      return recorder.toSnapshot(snapshot);
    },
  };
}
