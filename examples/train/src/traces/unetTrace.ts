import { InvalidArgumentError } from '@stowage/core';
import type { Tape } from './Tape.js';
import type { ModelTrace } from './Trace.js';
import { concat, conv3x3, downsample, norm, relu, upConv2x2 } from './layers.js';
import { resolveShapes } from './resolveShapes.js';
import { trainingTrace } from './trainingTrace.js';

/**
 * A U-Net over images [batch, inChannels, size, size]. Level l (0 … levels − 1) works at size / 2^l with
 * channels · 2^l channels; a conv is 3×3 convolution → norm → ReLU.
 * - Encoder level l < levels − 1: `convsPerLevel` convs (the skip is the last one's output), 2×2 average pooling.
 * - Bottom level: `convsPerLevel` convs.
 * - Decoder level l, from levels − 2 up to 0: a 2×2 transposed convolution from level l + 1 (halving the
 *   channels), concatenated with level l's skip, then `convsPerLevel` convs back to level l's channels.
 * - Then a 3×3 convolution to `outChannels`, the output. No biases; SGD.
 */
export type UnetTraceShapes = {
  readonly batch: number;
  readonly inChannels: number;
  readonly outChannels: number;
  /** Width and height of the input. */
  readonly size: number;
  /** Channels of level 0. */
  readonly channels: number;
  /** Resolutions, the bottom one included. */
  readonly levels: number;
  readonly convsPerLevel: number;
  /** 2 for bf16, 4 for fp32. */
  readonly bytesPerElement: number;
};

/**
 * bf16; 2 images of 128 × 128 × 3, 32 channels at level 0 (a level-0 activation is 2 MiB), 4 levels, 4 convs per
 * level. The original U-Net has 2 convs per level; with 2, the level-0 concat (it reads two level-0 activations and
 * creates two) needs about a fifth of P, so the default doubles the depth per level to keep every op within P/8.
 */
export const DEFAULT_UNET_TRACE_SHAPES: UnetTraceShapes = Object.freeze({ batch: 2, inChannels: 3, outChannels: 3, size: 128, channels: 32, levels: 4, convsPerLevel: 4, bytesPerElement: 2 });

/**
 * T3 of lms-anchors §7, a U-Net with long skip connections: each encoder level's output is made early in forward
 * and read late, by its decoder level, which LRU mishandles. Each iteration: forward, loss, backward in reverse
 * (a skip's gradient is created by the concat's backward and accumulated into by the pooling's), one SGD op per
 * weight.
 * @throws InvalidArgumentError for an unknown shape, one that is not a positive integer, or a size that does not
 *   halve evenly `levels − 1` times
 */
export function unetTrace(shapes?: Partial<UnetTraceShapes>): ModelTrace {
  const resolved = resolveShapes(DEFAULT_UNET_TRACE_SHAPES, shapes);
  if (resolved.size % 2 ** (resolved.levels - 1) !== 0) {
    throw new InvalidArgumentError('shapes.size', resolved.size, `a multiple of 2^(levels − 1) = ${2 ** (resolved.levels - 1)}`);
  }
  return trainingTrace({ name: 'unet', shapes: resolved, bytesPerElement: resolved.bytesPerElement, optimizer: 'sgd', forward: (tape) => unetForward(tape, resolved) });
}

function unetForward(tape: Tape, shapes: UnetTraceShapes): number {
  const { batch, levels } = shapes;
  const channels = (level: number) => shapes.channels * 2 ** level;
  const size = (level: number) => shapes.size / 2 ** level;
  const convs = (name: string, x: number, inChannels: number, level: number) => {
    for (let i = 1; i <= shapes.convsPerLevel; i++) {
      const conv = conv3x3(tape, `${name}.conv${i}`, x, batch, i === 1 ? inChannels : channels(level), channels(level), size(level));
      x = relu(tape, `${name}.relu${i}`, norm(tape, `${name}.norm${i}`, conv, channels(level)));
    }
    return x;
  };

  let x = tape.input('input', batch * shapes.inChannels * shapes.size ** 2);
  let inChannels = shapes.inChannels;
  const skips: number[] = [];
  for (let level = 0; level < levels - 1; level++) {
    const skip = convs(`down${level}`, x, inChannels, level);
    skips.push(skip);
    x = downsample(tape, `down${level}.pool`, skip);
    inChannels = channels(level);
  }
  x = convs('bottom', x, inChannels, levels - 1);
  for (let level = levels - 2; level >= 0; level--) {
    const up = upConv2x2(tape, `up${level}.upconv`, x, batch, channels(level + 1), channels(level), size(level + 1));
    x = convs(`up${level}`, concat(tape, `up${level}.concat`, up, skips[level]!), 2 * channels(level), level);
  }
  return conv3x3(tape, 'output', x, batch, channels(0), shapes.outChannels, size(0));
}
