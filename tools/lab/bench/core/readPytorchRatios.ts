import { readPytorchReference } from '@stowage/lab/replay';

/** PyTorch's own R/A (peak reserved / peak live) per trace name, from the trace root's README table. */
export function readPytorchRatios(traceRoot: string): Map<string, number> {
  return new Map([...readPytorchReference(traceRoot)].map(([name, row]) => [name, row.ratio]));
}
