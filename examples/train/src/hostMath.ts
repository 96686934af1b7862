// The arithmetic of the training ops on the host, as plain loops over Float32Arrays: the CPU reference (cpuOps.ts)
// runs them on views of its storages, the CUDA host ops (cuda/cudaHostOps.ts) on copies of device storages, so the
// two give the same bits for the same inputs.
//
// - Matrices are row-major; m, n, k are as in `Ops` (an [m, n] output, an inner dimension k).
// - Each function reads only its input arrays and writes every element of its output arrays (sgdStep: its
//   parameter in place); none keeps a reference to them.
// - Sums run in float64 in a fixed order (ascending index; products as in Note [Matmul order]), then round once to
//   float32, so the same inputs always give the same bits.
// - No function checks shapes: the ops do, before calling them. An array shorter than its shape says is undefined
//   behaviour (NaNs or a partial result, never an exception).

/** C = op(A)·op(B): A is [m,k] (stored [k,m] with transA), B is [k,n] (stored [n,k] with transB), C is [m,n]. */
export function matmulInto(C: Float32Array, A: Float32Array, B: Float32Array, m: number, n: number, k: number, transA: boolean, transB: boolean): void {
  // Note [Matmul order]: rows of a against rows of bᵀ, each a dot product in a fixed order.
  const rowsA = transA ? transpose(A, k, m) : A;
  const rowsB = transB ? B : transpose(B, k, n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) C[i * n + j] = dot(rowsA, i * k, rowsB, j * k, k);
}

/** Y = X + bias broadcast over rows: X and Y [m,n], bias [1,n]. */
export function addBiasInto(Y: Float32Array, X: Float32Array, bias: Float32Array, n: number): void {
  for (let i = 0; i < Y.length; i++) Y[i] = X[i]! + bias[i % n]!;
}

/** Y = A + B elementwise. */
export function addInto(Y: Float32Array, A: Float32Array, B: Float32Array): void {
  for (let i = 0; i < Y.length; i++) Y[i] = A[i]! + B[i]!;
}

/** Y = X * s elementwise. */
export function scaleInto(Y: Float32Array, X: Float32Array, s: number): void {
  for (let i = 0; i < Y.length; i++) Y[i] = X[i]! * s;
}

/** Y [1,n] = the sum over the rows of X [m,n]. */
export function sumRowsInto(Y: Float32Array, X: Float32Array, m: number, n: number): void {
  const sums = new Float64Array(n);
  for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) sums[j] = sums[j]! + X[i * n + j]!;
  Y.set(sums);
}

/** Y = max(X, 0) elementwise. */
export function reluInto(Y: Float32Array, X: Float32Array): void {
  for (let i = 0; i < Y.length; i++) Y[i] = X[i]! > 0 ? X[i]! : 0;
}

/** DX = DY where X > 0, else 0. */
export function reluBackwardInto(DX: Float32Array, DY: Float32Array, X: Float32Array): void {
  for (let i = 0; i < DX.length; i++) DX[i] = X[i]! > 0 ? DY[i]! : 0;
}

/** Y = the row-wise softmax of X [m,n]; with `causal`, entries j > i are 0 (m == n). */
export function softmaxInto(Y: Float32Array, X: Float32Array, m: number, n: number, causal: boolean): void {
  const e = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    const width = causal ? i + 1 : n;
    const base = i * n;
    let max = -Infinity;
    for (let j = 0; j < width; j++) max = Math.max(max, X[base + j]!);
    let sum = 0;
    for (let j = 0; j < width; j++) {
      e[j] = Math.exp(X[base + j]! - max);
      sum += e[j]!;
    }
    for (let j = 0; j < n; j++) Y[base + j] = j < width ? e[j]! / sum : 0;
  }
}

/** DX = Y * (DY - rowsum(DY * Y)), all [m,n]. */
export function softmaxBackwardInto(DX: Float32Array, DY: Float32Array, Y: Float32Array, m: number, n: number): void {
  for (let i = 0; i < m; i++) {
    const base = i * n;
    let dot = 0;
    for (let j = 0; j < n; j++) dot += DY[base + j]! * Y[base + j]!;
    for (let j = 0; j < n; j++) DX[base + j] = Y[base + j]! * (DY[base + j]! - dot);
  }
}

/** Row-wise layer norm of X [m,n]: Y = (X - mean) * rstd * gamma + beta, with MEAN and RSTD [m,1]. */
export function layerNormInto(
  Y: Float32Array,
  MEAN: Float32Array,
  RSTD: Float32Array,
  X: Float32Array,
  gamma: Float32Array,
  beta: Float32Array,
  m: number,
  n: number,
  eps: number,
): void {
  for (let i = 0; i < m; i++) {
    const base = i * n;
    let sum = 0;
    for (let j = 0; j < n; j++) sum += X[base + j]!;
    const mu = sum / n;
    let squares = 0;
    for (let j = 0; j < n; j++) squares += (X[base + j]! - mu) ** 2;
    const r = 1 / Math.sqrt(squares / n + eps);
    for (let j = 0; j < n; j++) Y[base + j] = (X[base + j]! - mu) * r * gamma[j]! + beta[j]!;
    MEAN[i] = mu;
    RSTD[i] = r;
  }
}

/** The gradients of layerNormInto: DX [m,n], DGAMMA and DBETA [1,n], from DY [m,n] and the forward's X, MEAN, RSTD, gamma. */
export function layerNormBackwardInto(
  DX: Float32Array,
  DGAMMA: Float32Array,
  DBETA: Float32Array,
  DY: Float32Array,
  X: Float32Array,
  MEAN: Float32Array,
  RSTD: Float32Array,
  gamma: Float32Array,
  m: number,
  n: number,
): void {
  const dg = new Float64Array(n);
  const db = new Float64Array(n);
  for (let i = 0; i < m; i++) {
    const base = i * n;
    const mu = MEAN[i]!;
    const r = RSTD[i]!;
    // dx = r * (g - mean(g) - xhat * mean(g * xhat)) where g = dy * gamma and xhat = (x - mu) * r.
    let sumG = 0;
    let sumGXhat = 0;
    for (let j = 0; j < n; j++) {
      const xhat = (X[base + j]! - mu) * r;
      const g = DY[base + j]! * gamma[j]!;
      sumG += g;
      sumGXhat += g * xhat;
      dg[j] = dg[j]! + DY[base + j]! * xhat;
      db[j] = db[j]! + DY[base + j]!;
    }
    const meanG = sumG / n;
    const meanGXhat = sumGXhat / n;
    for (let j = 0; j < n; j++) {
      const xhat = (X[base + j]! - mu) * r;
      DX[base + j] = r * (DY[base + j]! * gamma[j]! - meanG - xhat * meanGXhat);
    }
  }
  DGAMMA.set(dg);
  DBETA.set(db);
}

/** LOSS [1,1] = the mean squared error of P against T; GRAD = d loss / d P (all of P's shape). */
export function mseLossInto(LOSS: Float32Array, GRAD: Float32Array, P: Float32Array, T: Float32Array): void {
  const count = P.length;
  let squares = 0;
  for (let i = 0; i < count; i++) {
    const diff = P[i]! - T[i]!;
    squares += diff * diff;
    GRAD[i] = (2 * diff) / count;
  }
  LOSS[0] = squares / count;
}

/** In place: P -= lr * G. */
export function sgdStepInPlace(P: Float32Array, G: Float32Array, lr: number): void {
  for (let i = 0; i < P.length; i++) P[i] = P[i]! - lr * G[i]!;
}

// Note [Matmul order]: a dot product's adds form one dependency chain, which bounds a plain loop at one add per
// floating-point latency. `dot` keeps four partial sums (over p ≡ 0, 1, 2, 3 mod 4), adds them as
// (s0 + s1) + (s2 + s3), then the tail: a fixed order, so the result depends only on the inputs, about twice as
// fast. Operands are first copied into row-major rows of a and columns of b (a transpose of whichever is stored
// the other way), so every product reads both operands contiguously.

/** Σ x[xAt + p] · y[yAt + p] for p < k, in float64, in the order of Note [Matmul order]. */
function dot(x: Float32Array, xAt: number, y: Float32Array, yAt: number, k: number): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let p = 0;
  for (; p + 4 <= k; p += 4) {
    s0 += x[xAt + p]! * y[yAt + p]!;
    s1 += x[xAt + p + 1]! * y[yAt + p + 1]!;
    s2 += x[xAt + p + 2]! * y[yAt + p + 2]!;
    s3 += x[xAt + p + 3]! * y[yAt + p + 3]!;
  }
  let sum = s0 + s1 + (s2 + s3);
  for (; p < k; p++) sum += x[xAt + p]! * y[yAt + p]!;
  return sum;
}

/** The transpose of a row-major [rows, cols] matrix, as a new row-major [cols, rows] array. */
function transpose(x: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(rows * cols);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j * rows + i] = x[i * cols + j]!;
  return t;
}
