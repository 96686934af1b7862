import type { Ops, Tensor } from '@stowage/example-train';

// The op cases that a device's ops are checked on against the CPU reference: each op on seeded inputs, its
// transposes and causal form included. Shapes are small but span several 64-invocation workgroups (WebGPU) and end
// in a partial one.

/** A case: input shapes (filled with seeded values in [-1, 1)) and the op under test, returning its outputs. */
export interface OpCase {
  readonly op: string;
  readonly title: string;
  readonly shapes: readonly (readonly [number, number])[];
  readonly run: (ops: Ops, inputs: readonly Tensor[]) => Promise<readonly Tensor[]>;
  /** Makes input `index` fit the op (a positive rstd, say); the values as drawn when absent. */
  readonly prepare?: (values: Float32Array, index: number) => Float32Array;
}

const positive = (values: Float32Array): Float32Array => values.map((v) => Math.abs(v) + 0.5);

export const OP_CASES: readonly OpCase[] = [
  { op: 'matmul', title: 'a·b over partial tiles', shapes: [[19, 21], [21, 17]], run: async (o, [a, b]) => [await o.matmul(a!, b!)] },
  { op: 'matmul', title: 'aᵀ·b', shapes: [[21, 19], [21, 17]], run: async (o, [a, b]) => [await o.matmul(a!, b!, true)] },
  { op: 'matmul', title: 'a·bᵀ', shapes: [[19, 21], [17, 21]], run: async (o, [a, b]) => [await o.matmul(a!, b!, false, true)] },
  { op: 'matmul', title: 'aᵀ·bᵀ', shapes: [[21, 19], [17, 21]], run: async (o, [a, b]) => [await o.matmul(a!, b!, true, true)] },
  { op: 'addBias', title: 'x + bias on every row', shapes: [[13, 70], [1, 70]], run: async (o, [x, b]) => [await o.addBias(x!, b!)] },
  { op: 'add', title: 'a + b', shapes: [[13, 70], [13, 70]], run: async (o, [a, b]) => [await o.add(a!, b!)] },
  { op: 'scale', title: 'x * s', shapes: [[13, 70]], run: async (o, [x]) => [await o.scale(x!, -0.37)] },
  { op: 'sumRows', title: 'the column sums', shapes: [[33, 70]], run: async (o, [x]) => [await o.sumRows(x!)] },
  { op: 'relu', title: 'max(x, 0)', shapes: [[13, 70]], run: async (o, [x]) => [await o.relu(x!)] },
  { op: 'reluBackward', title: 'dy where x > 0', shapes: [[13, 70], [13, 70]], run: async (o, [dy, x]) => [await o.reluBackward(dy!, x!)] },
  { op: 'softmax', title: 'row-wise', shapes: [[70, 23]], run: async (o, [x]) => [await o.softmax(x!)] },
  { op: 'softmax', title: 'causal, zero above the diagonal', shapes: [[23, 23]], run: async (o, [x]) => [await o.softmax(x!, true)] },
  { op: 'softmaxBackward', title: 'y * (dy - rowsum(dy * y))', shapes: [[70, 23], [70, 23]], run: async (o, [dy, y]) => [await o.softmaxBackward(dy!, y!)] },
  {
    op: 'layerNorm',
    title: 'y, mean and rstd per row',
    shapes: [[70, 23], [1, 23], [1, 23]],
    run: async (o, [x, g, b]) => Object.values(await o.layerNorm(x!, g!, b!, 1e-5)),
  },
  {
    op: 'layerNormBackward',
    title: 'dx, dgamma and dbeta',
    shapes: [[70, 23], [70, 23], [70, 1], [70, 1], [1, 23]],
    prepare: (values, i) => (i === 3 ? positive(values) : values),
    run: async (o, [dy, x, mean, rstd, g]) => Object.values(await o.layerNormBackward(dy!, x!, mean!, rstd!, g!)),
  },
  { op: 'mseLoss', title: 'the mean loss and its gradient', shapes: [[70, 23], [70, 23]], run: async (o, [p, t]) => Object.values(await o.mseLoss(p!, t!)) },
  {
    op: 'sgdStep',
    title: 'param -= lr * grad, in place',
    shapes: [[13, 70], [13, 70]],
    run: async (o, [p, g]) => {
      await o.sgdStep(p!, g!, 0.1);
      return [p!];
    },
  },
];

/** The case's outputs on `ops`, from fresh inputs holding `values`. */
export async function runCase(ops: Ops, c: OpCase, values: readonly Float32Array[]): Promise<Float32Array[]> {
  const inputs = await Promise.all(c.shapes.map(([rows, cols], i) => ops.fromArray(rows, cols, values[i]!)));
  const outputs = await c.run(ops, inputs);
  const result = await Promise.all(outputs.map((t) => ops.toArray(t)));
  for (const t of new Set([...inputs, ...outputs])) t.storage.release();
  return result;
}

