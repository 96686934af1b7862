import type { StorageImpl, TensorImpl } from '@stowage/core';

/**
 * Pins the storages of one operation (its inputs and its outputs) for the operation's scope; disposing the guard
 * unpins them. Under LMS this is `@stowage/lms`'s `pinAsync` (WebGPU) or `pin` (CPU); without LMS a guard that does
 * nothing. Every operation pins before it touches data and disposes the guard only after its work was submitted.
 */
export type PinScope = (...items: readonly (StorageImpl | TensorImpl)[]) => Disposable | Promise<Disposable>;

/** A float32 2-D tensor ([rows, cols]); vectors are [1, n], scalars [1, 1]. Every op returns new tensors. */
export type Tensor = TensorImpl;

/**
 * The operations the training loop needs, on one device. Each pins its inputs and outputs through the PinScope it
 * was made with for as long as it reads or writes them, and is deterministic (the same inputs give the same bits).
 */
export interface Ops {
  readonly device: string;
  /** A new [rows, cols] tensor holding `values` (row-major). */
  fromArray(rows: number, cols: number, values: Float32Array): Promise<Tensor>;
  /** The tensor's values, row-major. */
  toArray(x: Tensor): Promise<Float32Array>;
  /** a·b with optional transposes: a is [m,k] (or [k,m] with transA), b is [k,n] (or [n,k] with transB); result [m,n]. */
  matmul(a: Tensor, b: Tensor, transA?: boolean, transB?: boolean): Promise<Tensor>;
  /** x + bias broadcast over rows: x [m,n], bias [1,n]. */
  addBias(x: Tensor, bias: Tensor): Promise<Tensor>;
  /** a + b elementwise (same shape). */
  add(a: Tensor, b: Tensor): Promise<Tensor>;
  /** x * s elementwise. */
  scale(x: Tensor, s: number): Promise<Tensor>;
  /** Sum over rows: x [m,n] → [1,n] (bias gradients). */
  sumRows(x: Tensor): Promise<Tensor>;
  relu(x: Tensor): Promise<Tensor>;
  /** dy where x > 0, else 0. */
  reluBackward(dy: Tensor, x: Tensor): Promise<Tensor>;
  /** Row-wise softmax of x [m,n]; with `causal`, entries j > i are masked out (m == n). */
  softmax(x: Tensor, causal?: boolean): Promise<Tensor>;
  /** Gradient through a row-wise softmax: dx = y * (dy - rowsum(dy * y)). */
  softmaxBackward(dy: Tensor, y: Tensor): Promise<Tensor>;
  /** Row-wise layer norm: y = (x - mean) * rstd * gamma + beta; returns y and the per-row mean and rstd ([m,1]). */
  layerNorm(x: Tensor, gamma: Tensor, beta: Tensor, eps: number): Promise<{ y: Tensor; mean: Tensor; rstd: Tensor }>;
  layerNormBackward(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, gamma: Tensor): Promise<{ dx: Tensor; dgamma: Tensor; dbeta: Tensor }>;
  /** Mean squared error of pred against target (same shape): the loss [1,1] and d loss / d pred. */
  mseLoss(pred: Tensor, target: Tensor): Promise<{ loss: Tensor; grad: Tensor }>;
  /** In place: param -= lr * grad (writes param's storage). */
  sgdStep(param: Tensor, grad: Tensor, lr: number): Promise<void>;
  /** Waits for the device's queued work (no-op on CPU). */
  finish(): Promise<void>;
}
