import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';

/** The garbage collector: `globalThis.gc` under `node --expose-gc`, else exposed through V8's flags. */
function collector(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/** Milliseconds to let Dawn's device thread finish and reclaim destroyed buffers. */
const SETTLE_MS = 50;

/**
 * Brings the process to a quiet state between measurements: submits nothing, waits for the queue to drain and
 * Dawn to reclaim destroyed buffers (a later submit ticks the device), and collects garbage (GPUBuffer wrappers,
 * the replay's handle arrays).
 */
export async function settleMemory(device: GPUDevice): Promise<void> {
  const gc = collector();
  device.queue.submit([]);
  await device.queue.onSubmittedWorkDone();
  await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
  device.queue.submit([]);
  await device.queue.onSubmittedWorkDone();
  gc();
  gc();
}
