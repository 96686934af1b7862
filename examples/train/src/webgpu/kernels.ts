// The WGSL compute kernels of the WebGPU ops, one entry point (`main`) each.
//
// - Operand i of a kernel is `@group(0) @binding(i)`, declared `var<storage, read_write>` whether the kernel reads
//   or writes it (Note [Read-write bindings] in KernelRunner.ts); every operand is used, so `layout: 'auto'` keeps
//   every binding.
// - Operand i's elements start at element `off(i)` of its binding (Note [Binding offsets] in KernelRunner.ts).
// - The parameters are one `Params` uniform at `@group(1) @binding(0)`: the shape (m, n, k), flags and a float
//   scalar, with the same meaning as the Ops member the kernel serves.
// - Deterministic: every output element is written by exactly one invocation, which sums in a fixed order
//   (ascending index); no atomics, and no result depends on how invocations are scheduled.
// - Every kernel runs WORKGROUP invocations per workgroup over a grid of up to 65,535 × y workgroups (`flatId`),
//   one invocation per output element, row or column, and returns past their count.
// - No workgroup memory and no barriers (Note [Untiled matmul]).

// Note [Untiled matmul]: matmul gives each invocation one output element and loops over the inner dimension reading
// the operands from storage. A tiled kernel (16 × 16 tiles staged in workgroup memory) sums in the same order, so
// it would give the same bits, but its workgroup barriers are expensive on SwiftShader, where the tests and CI run.
// On a hardware GPU a tiled kernel would pay off for large matrices; the example's are small.

/** Invocations per workgroup of every kernel. */
export const WORKGROUP = 64;

const PRELUDE = /* wgsl */ `
struct Params {
  o0: vec4<u32>,  // element offsets of operands 0..3 in their bindings
  o1: vec4<u32>,  // element offsets of operands 4..7
  m: u32,
  n: u32,
  k: u32,
  flags: u32,
  s0: f32,
  pad0: u32,
  pad1: u32,
  pad2: u32,
}
@group(1) @binding(0) var<uniform> p: Params;

const WORKGROUP = ${WORKGROUP}u;

fn flatId(wid: vec3<u32>, groups: vec3<u32>, lid: vec3<u32>) -> u32 {
  return (wid.y * groups.x + wid.x) * WORKGROUP + lid.x;
}
`;

/** Declares operands `names` as bindings 0, 1, … and `off0`, `off1`, … as their element offsets. */
function operands(...names: readonly string[]): string {
  const lanes = ['o0.x', 'o0.y', 'o0.z', 'o0.w', 'o1.x', 'o1.y', 'o1.z', 'o1.w'];
  return names
    .map((name, i) => `@group(0) @binding(${i}) var<storage, read_write> ${name}: array<f32>;\nfn off${i}() -> u32 { return p.${lanes[i]}; }`)
    .join('\n');
}

/** The entry point `main`: `body` runs once per index `i` below `count` (a WGSL u32 expression). */
function entryPoint(count: string, body: string): string {
  return /* wgsl */ `
@compute @workgroup_size(WORKGROUP)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = flatId(wid, groups, lid);
  if (i >= ${count}) { return; }
${body}
}`;
}

/**
 * The kernels by name. Shapes: m × n is the output (or the row-wise input) unless a kernel says otherwise.
 */
export const KERNELS = {
  /** c[m,n] = a·b, a [m,k] (or [k,m] with flags bit 0), b [k,n] (or [n,k] with bit 1); one invocation per element. */
  matmul: `${PRELUDE}
${operands('a', 'b', 'c')}
${entryPoint(
  'p.m * p.n',
  `  let row = i / p.n;
  let col = i % p.n;
  var aAt = off0() + row * p.k;
  var aStep = 1u;
  if ((p.flags & 1u) != 0u) { aAt = off0() + row; aStep = p.m; }
  var bAt = off1() + col;
  var bStep = p.n;
  if ((p.flags & 2u) != 0u) { bAt = off1() + col * p.k; bStep = 1u; }
  var sum = 0.0;
  for (var q = 0u; q < p.k; q++) {
    sum += a[aAt] * b[bAt];
    aAt += aStep;
    bAt += bStep;
  }
  c[off2() + i] = sum;`,
)}`,

  /** y = x + bias broadcast over rows; bias [1,n]. */
  addBias: `${PRELUDE}
${operands('x', 'bias', 'y')}
${entryPoint('p.m * p.n', '  y[off2() + i] = x[off0() + i] + bias[off1() + i % p.n];')}`,

  /** y = a + b. */
  add: `${PRELUDE}
${operands('a', 'b', 'y')}
${entryPoint('p.m * p.n', '  y[off2() + i] = a[off0() + i] + b[off1() + i];')}`,

  /** y = x * s0. */
  scale: `${PRELUDE}
${operands('x', 'y')}
${entryPoint('p.m * p.n', '  y[off1() + i] = x[off0() + i] * p.s0;')}`,

  /** y[1,n] = the sum of x's rows; one invocation per column. */
  sumRows: `${PRELUDE}
${operands('x', 'y')}
${entryPoint(
  'p.n',
  `  var sum = 0.0;
  for (var r = 0u; r < p.m; r++) { sum += x[off0() + r * p.n + i]; }
  y[off1() + i] = sum;`,
)}`,

  /** y = x where x > 0, else 0. */
  relu: `${PRELUDE}
${operands('x', 'y')}
${entryPoint('p.m * p.n', '  let v = x[off0() + i];\n  y[off1() + i] = select(0.0, v, v > 0.0);')}`,

  /** dx = dy where x > 0, else 0. */
  reluBackward: `${PRELUDE}
${operands('dy', 'x', 'dx')}
${entryPoint('p.m * p.n', '  dx[off2() + i] = select(0.0, dy[off0() + i], x[off1() + i] > 0.0);')}`,

  /** Row-wise softmax; one invocation per row. Flags bit 0: causal (row r keeps columns 0..r). */
  softmax: `${PRELUDE}
${operands('x', 'y')}
${entryPoint(
  'p.m',
  `  let base = i * p.n;
  var width = p.n;
  if ((p.flags & 1u) != 0u) { width = min(i + 1u, p.n); }
  var top = x[off0() + base];
  for (var j = 1u; j < width; j++) { top = max(top, x[off0() + base + j]); }
  var sum = 0.0;
  for (var j = 0u; j < width; j++) {
    let e = exp(x[off0() + base + j] - top);
    y[off1() + base + j] = e;
    sum += e;
  }
  for (var j = 0u; j < p.n; j++) {
    if (j < width) { y[off1() + base + j] = y[off1() + base + j] / sum; } else { y[off1() + base + j] = 0.0; }
  }`,
)}`,

  /** dx = y * (dy - rowsum(dy * y)); one invocation per row. */
  softmaxBackward: `${PRELUDE}
${operands('dy', 'y', 'dx')}
${entryPoint(
  'p.m',
  `  let base = i * p.n;
  var dot = 0.0;
  for (var j = 0u; j < p.n; j++) { dot += dy[off0() + base + j] * y[off1() + base + j]; }
  for (var j = 0u; j < p.n; j++) {
    dx[off2() + base + j] = y[off1() + base + j] * (dy[off0() + base + j] - dot);
  }`,
)}`,

  /** y = (x - mean) * rstd * gamma + beta per row, with mean and rstd [m,1]; s0 = eps; one invocation per row. */
  layerNorm: `${PRELUDE}
${operands('x', 'gamma', 'beta', 'y', 'mean', 'rstd')}
${entryPoint(
  'p.m',
  `  let base = i * p.n;
  let n = f32(p.n);
  var sum = 0.0;
  for (var j = 0u; j < p.n; j++) { sum += x[off0() + base + j]; }
  let mu = sum / n;
  var squares = 0.0;
  for (var j = 0u; j < p.n; j++) {
    let d = x[off0() + base + j] - mu;
    squares += d * d;
  }
  let r = 1.0 / sqrt(squares / n + p.s0);
  for (var j = 0u; j < p.n; j++) {
    y[off3() + base + j] = (x[off0() + base + j] - mu) * r * gamma[off1() + j] + beta[off2() + j];
  }
  mean[off4() + i] = mu;
  rstd[off5() + i] = r;`,
)}`,

  /**
   * dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) per row, where g = dy * gamma and xhat = (x - mean) * rstd;
   * one invocation per row.
   */
  layerNormBackward: `${PRELUDE}
${operands('dy', 'x', 'mean', 'rstd', 'gamma', 'dx')}
${entryPoint(
  'p.m',
  `  let base = i * p.n;
  let mu = mean[off2() + i];
  let r = rstd[off3() + i];
  var sumG = 0.0;
  var sumGXhat = 0.0;
  for (var j = 0u; j < p.n; j++) {
    let g = dy[off0() + base + j] * gamma[off4() + j];
    sumG += g;
    sumGXhat += g * ((x[off1() + base + j] - mu) * r);
  }
  let n = f32(p.n);
  let meanG = sumG / n;
  let meanGXhat = sumGXhat / n;
  for (var j = 0u; j < p.n; j++) {
    let xhat = (x[off1() + base + j] - mu) * r;
    dx[off5() + base + j] = r * (dy[off0() + base + j] * gamma[off4() + j] - meanG - xhat * meanGXhat);
  }`,
)}`,

  /** dgamma = column sums of dy * xhat, dbeta = column sums of dy ([1,n] each); one invocation per column. */
  layerNormParamGrads: `${PRELUDE}
${operands('dy', 'x', 'mean', 'rstd', 'dgamma', 'dbeta')}
${entryPoint(
  'p.n',
  `  var dg = 0.0;
  var db = 0.0;
  for (var r = 0u; r < p.m; r++) {
    let d = dy[off0() + r * p.n + i];
    dg += d * ((x[off1() + r * p.n + i] - mean[off2() + r]) * rstd[off3() + r]);
    db += d;
  }
  dgamma[off4() + i] = dg;
  dbeta[off5() + i] = db;`,
)}`,

  /**
   * Per row of pred and target [m,n]: grad = 2 * (pred - target) / count and the row's sum of squared
   * differences into rowSquares [m,1]; k = count (m * n); one invocation per row.
   */
  mseRows: `${PRELUDE}
${operands('pred', 'goal', 'grad', 'rowSquares')}
${entryPoint(
  'p.m',
  `  let base = i * p.n;
  let count = f32(p.k);
  var squares = 0.0;
  for (var j = 0u; j < p.n; j++) {
    let d = pred[off0() + base + j] - goal[off1() + base + j];
    squares += d * d;
    grad[off2() + base + j] = (2.0 * d) / count;
  }
  rowSquares[off3() + i] = squares;`,
)}`,

  /** loss [1,1] = the sum of rowSquares [m,1] / k, in row order; one invocation. */
  mseTotal: `${PRELUDE}
${operands('rowSquares', 'loss')}
${entryPoint(
  '1u',
  `  var sum = 0.0;
  for (var r = 0u; r < p.m; r++) { sum += rowSquares[off0() + r]; }
  loss[off1() + 0u] = sum / f32(p.k);`,
)}`,

  /** In place: param -= s0 * grad. */
  sgdStep: `${PRELUDE}
${operands('param', 'grad')}
${entryPoint('p.m * p.n', '  param[off0() + i] = param[off0() + i] - p.s0 * grad[off1() + i];')}`,
} as const;

export type KernelName = keyof typeof KERNELS;
