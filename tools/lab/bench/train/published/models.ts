import type { ModelTrace } from '@stowage/example-train';
import { InvalidArgumentError } from '@stowage/core';
import type { Handle, Net } from './Net.js';
import { add, attention, concat, conv, convOut, embedding, gelu, linear, linearWith, modelTrace, norm, pool, relu, upConv } from './Net.js';

// The published setups' models as traces (issue 33), generated from their shapes at the sizes the papers ran:
// ResNet-50 (TFLMS; the out-of-core system), 3D U-Net (TFLMS), VGG-16 (vDNN), BERT-large (Capuchin), and a
// GPT-2-class decoder of 1.5B parameters with mixed-precision Adam. Layer rules: Net.ts. Every trace's iterations are
// identical (a fixed-shape training loop).

/** Shapes every generator takes: the batch, and bytes per element (4 for fp32, 2 for fp16). */
type BatchShapes = {
  readonly batch: number;
  readonly bytesPerElement: number;
};

function check<S extends object>(defaults: S, given: Partial<S> | undefined): S {
  const shapes = { ...defaults, ...given } as Record<string, unknown>;
  for (const [key, value] of Object.entries(shapes)) {
    if (!Object.hasOwn(defaults, key)) throw new InvalidArgumentError(`shapes.${key}`, value, `one of ${Object.keys(defaults).join(', ')}`);
    if (!Number.isSafeInteger(value) || (value as number) <= 0) throw new InvalidArgumentError(`shapes.${key}`, value, 'a positive integer');
  }
  return Object.freeze(shapes) as S;
}

export type ResNet50Shapes = BatchShapes & { readonly imageSize: number; readonly classes: number };
/** fp32 ImageNet training at 224 × 224 (TFLMS and the out-of-core system trained fp32); batch 1,440 is the out-of-core paper's. */
export const RESNET50_SHAPES: ResNet50Shapes = Object.freeze({ batch: 1440, imageSize: 224, classes: 1000, bytesPerElement: 4 });

/**
 * ResNet-50 (v1.5: the stride on the 3×3 conv) training with momentum SGD: a 7×7/2 conv, BN, ReLU, 3×3/2 max
 * pooling, then stages of 3, 4, 6, 3 bottleneck blocks (1×1, 3×3, 1×1 convs, each with BN, widths 64 to 512,
 * outputs 4 × as wide, a projection shortcut in each stage's first block), global average pooling, a 1000-way FC.
 * @throws InvalidArgumentError for an unknown shape or one that is not a positive integer
 */
export function resnet50Trace(shapes?: Partial<ResNet50Shapes>): ModelTrace {
  const s = check(RESNET50_SHAPES, shapes);
  return modelTrace({ name: 'resnet50', shapes: s, bytesPerElement: s.bytesPerElement, optimizer: 'momentum', forward: (net) => resnet50Forward(net, s) });
}

function resnet50Forward(net: Net, s: ResNet50Shapes): Handle {
  const { batch } = s;
  let spatial = [s.imageSize, s.imageSize];
  let x = net.input('images', batch * 3 * s.imageSize ** 2);
  x = conv(net, 'conv1', x, { batch, inChannels: 3, outChannels: 64, spatial, kernel: 7, stride: 2 });
  spatial = convOut(spatial, 2);
  x = relu(net, 'conv1.relu', norm(net, 'conv1.bn', x, 64));
  spatial = convOut(spatial, 2);
  x = pool(net, 'pool1', x, batch * 64 * spatial[0]! * spatial[1]!, 'max', 9);
  let channels = 64;
  const stages = [
    { blocks: 3, width: 64 },
    { blocks: 4, width: 128 },
    { blocks: 6, width: 256 },
    { blocks: 3, width: 512 },
  ];
  for (const [stage, { blocks, width }] of stages.entries()) {
    for (let block = 0; block < blocks; block++) {
      const at = `stage${stage + 1}.block${block + 1}`;
      const stride = block === 0 && stage > 0 ? 2 : 1;
      const out = 4 * width;
      const unit = (name: string, input: Handle, inChannels: number, outChannels: number, kernel: number, inSpatial: number[], convStride: number, withRelu: boolean): Handle => {
        const y = norm(net, `${at}.${name}.bn`, conv(net, `${at}.${name}`, input, { batch, inChannels, outChannels, spatial: inSpatial, kernel, stride: convStride }), outChannels);
        return withRelu ? relu(net, `${at}.${name}.relu`, y) : y;
      };
      const a = unit('conv1', x, channels, width, 1, spatial, 1, true);
      const b = unit('conv2', a, width, width, 3, spatial, stride, true);
      const outSpatial = convOut(spatial, stride);
      const c = unit('conv3', b, width, out, 1, outSpatial, 1, false);
      const shortcut = block === 0 ? unit('shortcut', x, channels, out, 1, spatial, stride, false) : x;
      x = relu(net, `${at}.relu`, add(net, `${at}.add`, c, shortcut));
      spatial = outSpatial;
      channels = out;
    }
  }
  x = pool(net, 'avgpool', x, batch * channels, 'average', spatial[0]! * spatial[1]!);
  return linear(net, 'fc', x, batch, channels, s.classes);
}

export type Vgg16Shapes = BatchShapes & { readonly imageSize: number; readonly classes: number };
/** vDNN's: fp32, batch 256 at 224 × 224. */
export const VGG16_SHAPES: Vgg16Shapes = Object.freeze({ batch: 256, imageSize: 224, classes: 1000, bytesPerElement: 4 });

const VGG16_CONVS: readonly (number | 'pool')[] = [64, 64, 'pool', 128, 128, 'pool', 256, 256, 256, 'pool', 512, 512, 512, 'pool', 512, 512, 512, 'pool'];

/**
 * VGG-16 (configuration D) training with momentum SGD: thirteen 3×3 convs, each followed by ReLU, five 2×2 max
 * poolings, then FC 25088→4096, ReLU, 4096→4096, ReLU, 4096→1000 (no dropout: it adds masks, not reuse).
 * @throws InvalidArgumentError for an unknown shape, one that is not a positive integer, or an image size that
 *   five 2×2 poolings do not divide
 */
export function vgg16Trace(shapes?: Partial<Vgg16Shapes>): ModelTrace {
  const s = check(VGG16_SHAPES, shapes);
  if (s.imageSize % 32 !== 0) throw new InvalidArgumentError('shapes.imageSize', s.imageSize, 'a multiple of 32 (five 2×2 poolings)');
  return modelTrace({ name: 'vgg16', shapes: s, bytesPerElement: s.bytesPerElement, optimizer: 'momentum', forward: (net) => vgg16Forward(net, s) });
}

function vgg16Forward(net: Net, s: Vgg16Shapes): Handle {
  const { batch } = s;
  let size = s.imageSize;
  let channels = 3;
  let x = net.input('images', batch * 3 * size ** 2);
  let layer = 0;
  let block = 1;
  for (const item of VGG16_CONVS) {
    if (item === 'pool') {
      size /= 2;
      x = pool(net, `pool${block}`, x, batch * channels * size ** 2, 'max', 4);
      block++;
      continue;
    }
    layer++;
    x = relu(net, `conv${layer}.relu`, conv(net, `conv${layer}`, x, { batch, inChannels: channels, outChannels: item, spatial: [size, size], kernel: 3 }));
    channels = item;
  }
  const flat = channels * size ** 2;
  x = relu(net, 'fc6.relu', linear(net, 'fc6', x, batch, flat, 4096));
  x = relu(net, 'fc7.relu', linear(net, 'fc7', x, batch, 4096, 4096));
  return linear(net, 'fc8', x, batch, 4096, s.classes);
}

export type Unet3dShapes = BatchShapes & {
  /** Edge of the cubic input volume. */
  readonly size: number;
  readonly inChannels: number;
  readonly outChannels: number;
  /** Channels of level 0; level l has channels · 2^l. */
  readonly channels: number;
  /** Resolutions, the bottom one included. */
  readonly levels: number;
};
/**
 * TFLMS's 3D U-Net case: fp32, batch 4 of 192³ volumes of 4 channels (brain MRI modalities) into 3 classes, 16
 * channels at level 0, 5 levels (as the Keras 3D U-Net IBM's case study trained is configured by default; stated
 * here, not retrieved from the paper).
 */
export const UNET3D_SHAPES: Unet3dShapes = Object.freeze({ batch: 4, size: 192, inChannels: 4, outChannels: 3, channels: 16, levels: 5, bytesPerElement: 4 });

/**
 * A 3D U-Net training with Adam: each level two 3×3×3 convs (each with BN and ReLU); 2×2×2 max pooling down; a
 * 2×2×2 transposed conv up, concatenated with the level's skip; a 1×1×1 conv to the classes.
 * @throws InvalidArgumentError for an unknown shape, one that is not a positive integer, or a size that does not
 *   halve evenly levels − 1 times
 */
export function unet3dTrace(shapes?: Partial<Unet3dShapes>): ModelTrace {
  const s = check(UNET3D_SHAPES, shapes);
  if (s.size % 2 ** (s.levels - 1) !== 0) throw new InvalidArgumentError('shapes.size', s.size, `a multiple of 2^(levels − 1) = ${2 ** (s.levels - 1)}`);
  return modelTrace({ name: 'unet3d', shapes: s, bytesPerElement: s.bytesPerElement, optimizer: 'adam', forward: (net) => unet3dForward(net, s) });
}

function unet3dForward(net: Net, s: Unet3dShapes): Handle {
  const { batch } = s;
  const channels = (level: number) => s.channels * 2 ** level;
  const spatial = (level: number) => [0, 1, 2].map(() => s.size / 2 ** level);
  const convs = (name: string, x: Handle, inChannels: number, level: number): Handle => {
    for (let i = 1; i <= 2; i++) {
      const c = conv(net, `${name}.conv${i}`, x, { batch, inChannels: i === 1 ? inChannels : channels(level), outChannels: channels(level), spatial: spatial(level), kernel: 3 });
      x = relu(net, `${name}.relu${i}`, norm(net, `${name}.bn${i}`, c, channels(level)));
    }
    return x;
  };
  let x = net.input('volumes', batch * s.inChannels * s.size ** 3);
  let inChannels = s.inChannels;
  const skips: Handle[] = [];
  for (let level = 0; level < s.levels - 1; level++) {
    const skip = convs(`down${level}`, x, inChannels, level);
    skips.push(skip);
    x = pool(net, `down${level}.pool`, skip, net.elementsOf(skip) / 8, 'max', 8);
    inChannels = channels(level);
  }
  x = convs('bottom', x, inChannels, s.levels - 1);
  for (let level = s.levels - 2; level >= 0; level--) {
    const up = upConv(net, `up${level}.upconv`, x, { batch, inChannels: channels(level + 1), outChannels: channels(level), spatial: spatial(level + 1) });
    x = convs(`up${level}`, concat(net, `up${level}.concat`, up, skips[level]!), 2 * channels(level), level);
  }
  return conv(net, 'output', x, { batch, inChannels: channels(0), outChannels: s.outChannels, spatial: spatial(0), kernel: 1 });
}

export type BertShapes = BatchShapes & {
  readonly sequence: number;
  readonly layers: number;
  readonly model: number;
  readonly heads: number;
  readonly hidden: number;
  readonly vocabulary: number;
  /** Masked positions per sequence that the MLM head predicts. */
  readonly masked: number;
};
/** BERT-large pre-training, fp32, sequences of 128 with 20 masked positions each (Google's phase-1 settings). */
export const BERT_LARGE_SHAPES: BertShapes = Object.freeze({ batch: 64, sequence: 128, layers: 24, model: 1024, heads: 16, hidden: 4096, vocabulary: 30522, masked: 20, bytesPerElement: 4 });

/**
 * BERT-large masked-language-model training with Adam: token and position embeddings, layer norm, 24 post-norm
 * encoder layers (QKV, materialised attention, projection, + residual, norm, MLP with GELU, + residual, norm), then
 * the masked positions' rows through a dense layer, GELU, norm, and the decoder tied to the token embedding.
 * @throws InvalidArgumentError for an unknown shape or one that is not a positive integer
 */
export function bertTrace(shapes?: Partial<BertShapes>): ModelTrace {
  const s = check(BERT_LARGE_SHAPES, shapes);
  return modelTrace({ name: 'bert-large', shapes: s, bytesPerElement: s.bytesPerElement, optimizer: 'adam', forward: (net) => bertForward(net, s) });
}

function bertForward(net: Net, s: BertShapes): Handle {
  const { batch, sequence, model, heads, hidden } = s;
  const rows = batch * sequence;
  const tokens = net.parameter('embeddings.tokens', s.vocabulary * model);
  const positions = net.parameter('embeddings.positions', 512 * model);
  const ids = net.input('token ids', rows, 4);
  const embedded = embedding(net, 'embeddings.lookup', ids, tokens, rows, model);
  let x = norm(net, 'embeddings.norm', add(net, 'embeddings.sum', embedded, embedding(net, 'embeddings.position', ids, positions, rows, model)), model);
  for (let layer = 1; layer <= s.layers; layer++) {
    const at = (name: string) => `layer${layer}.${name}`;
    const qkv = linear(net, at('qkv'), x, rows, model, 3 * model);
    const projected = linear(net, at('proj'), attention(net, at('attention'), qkv, batch, heads, sequence, model), rows, model, model);
    const x1 = norm(net, at('norm1'), add(net, at('residual1'), x, projected), model);
    const down = linear(net, at('down'), gelu(net, at('gelu'), linear(net, at('up'), x1, rows, model, hidden)), rows, hidden, model);
    x = norm(net, at('norm2'), add(net, at('residual2'), x1, down), model);
  }
  const maskedRows = batch * s.masked;
  const gathered = net.activation('mlm.gather.out', maskedRows * model);
  net.trace.op('mlm.gather', { reads: [x], writes: [gathered], flops: maskedRows * model });
  net.onBackward(() => net.trace.op('mlm.gather.backward', { reads: [net.grad(gathered)], writes: [net.grad(x)], flops: rows * model }));
  const transformed = norm(net, 'mlm.norm', gelu(net, 'mlm.gelu', linear(net, 'mlm.dense', gathered, maskedRows, model, model)), model);
  return linearWith(net, 'mlm.decoder', transformed, tokens, maskedRows, model, s.vocabulary);
}

export type Gpt2Shapes = BatchShapes & {
  readonly sequence: number;
  readonly layers: number;
  readonly model: number;
  readonly heads: number;
  readonly hidden: number;
  readonly vocabulary: number;
};
/**
 * GPT-2's 1.5B configuration (48 layers, width 1600, 25 heads, context 1024, vocabulary 50,257) in mixed precision:
 * fp16 weights, activations and gradients, an fp32 master copy and Adam's m and v (16 bytes per parameter).
 */
export const GPT2_XL_SHAPES: Gpt2Shapes = Object.freeze({ batch: 4, sequence: 1024, layers: 48, model: 1600, heads: 25, hidden: 6400, vocabulary: 50257, bytesPerElement: 2 });

/**
 * A GPT-2-class decoder trained with mixed-precision Adam: token and position embeddings, pre-norm blocks (norm,
 * QKV, materialised causal attention, projection, + residual, norm, MLP with GELU, + residual), a final norm, and
 * the head tied to the token embedding over every position.
 * @throws InvalidArgumentError for an unknown shape or one that is not a positive integer
 */
export function gpt2Trace(shapes?: Partial<Gpt2Shapes>): ModelTrace {
  const s = check(GPT2_XL_SHAPES, shapes);
  return modelTrace({ name: 'gpt2-1.5b', shapes: s, bytesPerElement: s.bytesPerElement, optimizer: 'mixed-adam', forward: (net) => gpt2Forward(net, s) });
}

function gpt2Forward(net: Net, s: Gpt2Shapes): Handle {
  const { batch, sequence, model, heads, hidden } = s;
  const rows = batch * sequence;
  const tokens = net.parameter('wte', s.vocabulary * model);
  const positions = net.parameter('wpe', sequence * model);
  const ids = net.input('token ids', rows, 4);
  let x = add(net, 'embed', embedding(net, 'wte.lookup', ids, tokens, rows, model), embedding(net, 'wpe.lookup', ids, positions, rows, model));
  for (let layer = 1; layer <= s.layers; layer++) {
    const at = (name: string) => `h${layer}.${name}`;
    const qkv = linear(net, at('qkv'), norm(net, at('ln1'), x, model), rows, model, 3 * model);
    const projected = linear(net, at('proj'), attention(net, at('attention'), qkv, batch, heads, sequence, model), rows, model, model);
    const afterAttention = add(net, at('residual1'), x, projected);
    const up = gelu(net, at('gelu'), linear(net, at('up'), norm(net, at('ln2'), afterAttention, model), rows, model, hidden));
    x = add(net, at('residual2'), afterAttention, linear(net, at('down'), up, rows, hidden, model));
  }
  return linearWith(net, 'lm_head', norm(net, 'ln_f', x, model), tokens, rows, model, s.vocabulary);
}

/** The five generators by name. */
export const PUBLISHED_MODELS = Object.freeze({
  resnet50: resnet50Trace,
  unet3d: unet3dTrace,
  vgg16: vgg16Trace,
  'bert-large': bertTrace,
  'gpt2-1.5b': gpt2Trace,
});
