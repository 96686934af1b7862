import { InvalidArgumentError, TensorImpl } from '@stowage/core';
import type { Tensor } from './Ops.js';

/** A 2-D tensor's [rows, cols]. */
export type Shape = readonly [rows: number, cols: number];

/** The operand checks of one device's ops: every operand is a contiguous float32 2-D tensor on that device. */
export interface ShapeChecks {
  /** x's [rows, cols]. @throws InvalidArgumentError unless x is a contiguous float32 2-D tensor on the device. */
  shapeOf(argument: string, x: Tensor): Shape;
  /** @throws InvalidArgumentError unless x is a contiguous float32 tensor of `shape` on the device. */
  checkShape(argument: string, x: Tensor, shape: Shape): void;
}

export function shapeChecks(deviceType: string): ShapeChecks {
  const shapeOf = (argument: string, x: Tensor): Shape => {
    if (!(x instanceof TensorImpl) || x.dtype !== 'float32' || x.dim !== 2 || !x.isContiguous() || x.device.type !== deviceType) {
      throw new InvalidArgumentError(argument, x instanceof TensorImpl ? describeShape(x) : x, `a contiguous float32 [rows, cols] tensor on ${deviceType}`);
    }
    return [x.sizes[0]!, x.sizes[1]!];
  };
  const checkShape = (argument: string, x: Tensor, shape: Shape): void => {
    const [rows, cols] = shapeOf(argument, x);
    if (rows !== shape[0] || cols !== shape[1]) throw new InvalidArgumentError(argument, describeShape(x), `of shape [${shape[0]}, ${shape[1]}]`);
  };
  return { shapeOf, checkShape };
}

/** How an error names a tensor operand. */
export function describeShape(x: Tensor): string {
  return `a ${x.dtype} tensor of sizes [${x.sizes.join(', ')}] on ${x.device.type}`;
}
