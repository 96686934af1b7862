import { expect } from 'chai';
import { mulberry32, uniformArray } from '@stowage/example-train';

// Naive float64 references of the ops, and central finite differences over them.

/** A row-major matrix in float64. */
export interface Matrix {
  readonly rows: number;
  readonly cols: number;
  readonly values: Float64Array;
}

export function matrix(rows: number, cols: number, values: ArrayLike<number>): Matrix {
  return { rows, cols, values: Float64Array.from(values) };
}

/** `count` seeded floats uniform in [-1, 1), rounded to float32. */
export function randomValues(seed: number, count: number): Float32Array {
  return uniformArray(mulberry32(seed), count, 1);
}

export function at(x: Matrix, i: number, j: number): number {
  return x.values[i * x.cols + j]!;
}

export function transposed(x: Matrix): Matrix {
  const values = new Float64Array(x.values.length);
  for (let i = 0; i < x.rows; i++) for (let j = 0; j < x.cols; j++) values[j * x.rows + i] = at(x, i, j);
  return { rows: x.cols, cols: x.rows, values };
}

export function matmulRef(a: Matrix, b: Matrix): Matrix {
  const values = new Float64Array(a.rows * b.cols);
  for (let i = 0; i < a.rows; i++) {
    for (let j = 0; j < b.cols; j++) {
      let sum = 0;
      for (let p = 0; p < a.cols; p++) sum += at(a, i, p) * at(b, p, j);
      values[i * b.cols + j] = sum;
    }
  }
  return { rows: a.rows, cols: b.cols, values };
}

export function softmaxRef(x: Matrix, causal: boolean): Matrix {
  const values = new Float64Array(x.values.length);
  for (let i = 0; i < x.rows; i++) {
    const width = causal ? i + 1 : x.cols;
    let sum = 0;
    for (let j = 0; j < width; j++) sum += Math.exp(at(x, i, j));
    for (let j = 0; j < width; j++) values[i * x.cols + j] = Math.exp(at(x, i, j)) / sum;
  }
  return { ...x, values };
}

export function layerNormRef(x: Matrix, gamma: Matrix, beta: Matrix, eps: number): { y: Matrix; mean: number[]; rstd: number[] } {
  const values = new Float64Array(x.values.length);
  const mean: number[] = [];
  const rstd: number[] = [];
  for (let i = 0; i < x.rows; i++) {
    const row = Array.from({ length: x.cols }, (_, j) => at(x, i, j));
    const mu = row.reduce((s, v) => s + v, 0) / x.cols;
    const variance = row.reduce((s, v) => s + (v - mu) ** 2, 0) / x.cols;
    const r = 1 / Math.sqrt(variance + eps);
    row.forEach((v, j) => (values[i * x.cols + j] = (v - mu) * r * gamma.values[j]! + beta.values[j]!));
    mean.push(mu);
    rstd.push(r);
  }
  return { y: { ...x, values }, mean, rstd };
}

export function mseRef(pred: Matrix, target: Matrix): number {
  let sum = 0;
  for (let i = 0; i < pred.values.length; i++) sum += (pred.values[i]! - target.values[i]!) ** 2;
  return sum / pred.values.length;
}

/** Σ w ⊙ y: the scalar whose gradient with respect to y is w. */
export function weightedSum(y: Matrix, w: Matrix): number {
  let sum = 0;
  for (let i = 0; i < y.values.length; i++) sum += y.values[i]! * w.values[i]!;
  return sum;
}

/** d loss / d x by central differences in float64, one coordinate at a time. */
export function numericGradient(x: Matrix, loss: (x: Matrix) => number, h = 1e-6): Float64Array {
  const gradient = new Float64Array(x.values.length);
  for (let i = 0; i < x.values.length; i++) {
    const plus = new Float64Array(x.values);
    const minus = new Float64Array(x.values);
    plus[i] = x.values[i]! + h;
    minus[i] = x.values[i]! - h;
    gradient[i] = (loss({ ...x, values: plus }) - loss({ ...x, values: minus })) / (2 * h);
  }
  return gradient;
}

/** Every |actual - expected| <= absolute + relative * |expected|, naming the first index that is not. */
export function expectClose(actual: ArrayLike<number>, expected: ArrayLike<number>, absolute = 1e-5, relative = 1e-4): void {
  expect(actual.length, 'length').to.equal(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i]!;
    const e = expected[i]!;
    if (!(Math.abs(a - e) <= absolute + relative * Math.abs(e))) expect.fail(`element ${i}: got ${a}, expected ${e} (±${absolute + relative * Math.abs(e)})`);
  }
}
