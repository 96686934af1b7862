import type { TraceFile } from '@stowage/lab/replay';

/**
 * The default traces: PyTorch recordings of different shapes — a small forward pass, a forward pass with a warm
 * cache, a federated fine-tuning run from its start, a compiled training step, a 2.7B model's forward, backward
 * and optimizer step, and a ResNet-18 training iteration (sizes unscaled: its peak is under 512 MiB).
 */
export const DEFAULT_TRACES: readonly string[] = [
  'cs336_forward_fp32_ctx128_b',
  'cs336_small_forward_earlier',
  'opt125m_zeroth_order_fedlearn_fromstart',
  'cs336_compiled_train_step',
  'cs336_2p7b_ctx128_fwdbwd_plus_step',
  'zdevito_resnet18_train_iter',
];

/**
 * The traces to replay, in `listTraces` order: those whose name contains `trace` when given (among all), else all
 * of them with `all`, else the PyTorch traces named in {@link DEFAULT_TRACES} that exist.
 */
export function selectTraces(traces: readonly TraceFile[], options: { readonly trace?: string | undefined; readonly all: boolean }): TraceFile[] {
  if (options.trace !== undefined) return traces.filter((t) => t.name.includes(options.trace!));
  if (options.all) return [...traces];
  return traces.filter((t) => t.kind === 'pytorch' && DEFAULT_TRACES.includes(t.name));
}
