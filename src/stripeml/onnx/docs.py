"""Generates ``docs/onnx.md`` from the op registry.

    python -m stripeml.onnx.docs > docs/onnx.md

The test suite checks that the committed file matches this output, so the
list of supported operators is always the code's.
"""

from __future__ import annotations

from .ops import supported_ops

HEADER = """\
# The ONNX frontend

`stripeml.onnx` imports an ONNX model and compiles the whole graph as one Tile
program, so fusion and memory planning work across operators.

```python
import stripeml.onnx
f = stripeml.onnx.compile("model.onnx", target="cpu")   # or a ModelProto
y = f(x)                      # NumPy in, NumPy out (a tuple for several outputs)
f.source(x)                   # the generated Tile program
f.lower(x).ir                 # its optimised Stripe IR (also .stages, .code, .peak_bytes)
```

From the shell: `stripeml onnx MODEL.onnx [--target T] [--random] [--check] [--bench N]`
compiles with progress output, runs on ones (or seeded random inputs), compares
with onnxruntime (`--check`, when installed) and prints the latency, onnxruntime's
in the same process, and the slowest kernels.

`stripeml.onnx.backend` implements ONNX's backend interface (`prepare`,
`run_model`, `run_node`, `supports_device`, `is_compatible`);
`tests/onnx_frontend/test_node_suite.py` runs the node tests shipped with the
`onnx` package through it, and `tests/onnx_frontend/exclusions.py` lists the
tests it leaves out, grouped by reason.

## How a model is compiled

1. **Specialisation.** Like `stripeml.compile`, a model is compiled per call
   signature: input shapes and dtypes, plus the *values* of graph inputs that an
   operator needs when compiling (the `shape` of a `Reshape`, the `pads` of a
   `Pad`, ...: the "static inputs" below).  Initializers are always known.
   A call whose arguments are arrays (positional, all of them) of exactly the
   last call's shapes and dtypes, in a model without static inputs, runs the
   last call's program without checking its arguments or building its
   signature again (they passed both then): 13.5 against 21 us of CPU per call
   for a one-node model on one thread (onnxruntime: 5.5), which the
   recurrent models' few-microsecond steps feel.  Any other call takes the full
   path, so a changed shape, dtype or rank is still checked and compiled for.
2. **Operators are written in Tile** (`src/stripeml/onnx/ops/`): each returns
   Tile statements with the shapes and dtypes it declares, and the importer
   checks every declaration against the Tile frontend's own inference.
3. **Constant folding.** A node whose inputs are all known is run once on the
   interpreter at import, so shape arithmetic and weight generation never reach
   the compiled program.  Weights stay parameters of the generated function
   (passed at every call), not literals in its source.  What a node folded to
   is remembered per model, by the identity of its input arrays: another input
   shape folds again only the nodes whose inputs changed (shape arithmetic),
   not the weights' preprocessing.  Those folded constants live as long as
   the compiled model, as its weights do.  The Tile program a fold runs is
   compiled once per process (`folding._program`, the 128 most recent): a new
   shape runs its shape arithmetic's programs on the new values without
   parsing, lowering or verifying them again; and a `Gather` of known
   integers (a shape's entries, as PyTorch exports `x.size(1)`) is taken at
   import, as `Concat` joins known values, with no program at all (BERT-base:
   31 of them, 1-4 ms each, at every sequence length).  A fold's disk-cache
   key hashes its inputs' own memory (no copy of a 1.5 MB position table),
   and the interpreter reads and writes a one-point view through a strided
   view of its storage instead of a list of offsets (BERT-base's position
   `Gather` at a new length: 42 -> 37 ms under the profiler, most of the
   rest NumPy's first touch of fresh memory).
4. **Channels-last images** (`layout.py`; the convolutions in `layout_conv.py`):
   4-D activations are stored NHWC
   between the operators that understand it (Conv with a BatchNormalization
   folded in, pools, elementwise operators, Concat), and
   transposed back to NCHW only where another operator or a graph output
   needs it.  A convolution's weights (one group, a multiple of 64 output
   channels, not 3 x 3 with stride 1) are bound as the file stores them
   (`(CO, CI, KH, KW)`, the array read, not a copy; a BatchNormalization's
   scale multiplies the sums in the kernel's epilogue): the target's pipeline
   lays them out for its register tiles once, at the first call
   (docs/cpu-backend.md, "Warm starts"); other weights are copied
   channels-last at import.
5. **One program.** The Tile program goes through the target's pass pipeline
   (fusion of elementwise chains into their producers, register tiling,
   threads) and is cached on disk: a warm start still imports the model, but
   skips lowering, the passes and all LLVM compilation.

Errors are `stripeml.StripeError`s (`stripeml.onnx.OnnxError` for the
importer) naming the node and operator: unsupported operators, attributes,
element types (strings), and values needed when compiling that are only
known at run time.

### Shorter lengths through the first length's program

A model whose inputs have symbolic dimensions (a sequence, a batch) is
compiled per input shape, but a shorter length does not wait for its own
compile (`src/stripeml/onnx/lengths.py`):

* **At the first call** of such a model, each of the two largest distinct
  sizes of 2 or more that it gives the symbolic dimensions is a *length*
  (BERT-base called with a batch of 1 and 128 tokens has one, 128; a batch of
  8 with 128 tokens has two).  For each length `N` the importer imports the
  model once more at `N - 1` (import and folding only: about 0.06 s for
  BERT-base).  If each of those Tile programs is the first one's text but
  for numbers that are `N` there and `N - 1` here, each in a size (a
  parameter's dimension, a contraction's output sizes, a `reshape`'s sizes),
  and every statement keeps each position of the axes those sizes mark
  (below), the program is written with every reduction over such positions
  masked: `index(X, axis) < LEN ? X : fill`, `LEN` (`LEN1` for a second
  length) a run-time input and `fill` the reduction's identity (0 for sums,
  -inf for maximums, +inf for minimums, 1 for products).  It runs with
  `LEN = N`.
* **A call at `S <= N`** (every length at most the program's, one shorter,
  every other size the same) is imported at its sizes (no compile) and
  checked to be the program of `N` restricted to `S`: the same text, the
  numbers that changed at `N - 1` equal to `S` and every other number the
  same, and every constant equal or, along its marked axes, the first `S`
  positions of the one at `N` (a position table, a mask).  It then runs the
  program of `N` on its inputs padded with zeros to `N`, with `LEN = S`, and
  its outputs are cut to `S`.
* **The steady state.**  That program does `N`'s work, so the third call at
  a length (`lengths.CALLS_BEFORE_OWN` = 2 calls through the longer program
  first) compiles the length's own program from the import its check made,
  and every later call runs that.  A length above `N` is compiled as the
  first was (a probe at one less, the masks), and the lengths below it run
  that program from then on; a length that fails the check is compiled as
  before.  `STRIPEML_LENGTHS=0` turns all of this off.

**Which programs keep positions.**  Element-wise statements do.  A
contraction may index a marked axis only by a plain index, or an operand's
by a fixed position (the first token's: the program then takes no length
shorter than that position); an index that carries a position to a marked
output axis may index only marked axes; an index on a marked operand axis
that is not in the output is a reduction over positions, and is allowed
when every operand is read along it (a sum of products gets both factors
masked, so a padded value times a padded value is 0 times 0) and the
statement has no constraint on it.  A `reshape` must keep the marked axes
whole and in order, with as many elements before, between and after them.
A `gather` may read along a marked axis only with constant indices, which
each call checks are below its length.  Anything else keeps the model per
length: a mean over the sequence (its `1/N` is a value), a convolution or
pooling along it (a shifted read: the last position's neighbour would be
padding, not the zero border), a flattening of the sequence into another
axis, a concatenation that makes it `N + 1`.

**Measured** (BERT-base with a symbolic sequence, `bench_compile.py --no-tile
--models bert_base_seq --repeats 3`, 2026-12-07 23:37-23:40 UTC, load
1.3-1.4, this tree against its parent alternated, two sittings each): the
second length (64 after 128) 0.489-0.500 s -> 0.176-0.177 s, 0.434-0.439 ->
0.142-0.144 of the first compile, which rose 1.129-1.141 -> 1.227-1.244 s
(the probe import, and parsing the program once more to find its masks).
Steady state at 128 (`bench_onnx.py --set bert_base_seq --blocks 5`, three
alternated rounds, load 1.3-1.7): 0.853, 0.885, 0.878 of onnxruntime's time
before, 0.833, 0.885, 0.860 with the masks.  The masked program has four
masks a layer (the scores before the maximum, the exponentials before the
sum, the probabilities and the values before their product); one fuses
into its neighbour, three are root kernels of their own (283 -> 319 root
kernels), and `nest` forms the 12 attention nests as before.  What the
probe found is kept in the disk cache (`lengths/`, `onnx/lengths_memo.py`):
a warm start neither probes nor parses again (BERT-base from memory, fresh
processes alternated, 2026-12-08 00:41 UTC, load 1.7-2.4: 0.66-0.69 s to the
first result, against 0.64-0.67 s with `STRIPEML_LENGTHS=0`; 0.71 s against
0.60-0.62 s before the record).  Through the program of 128, BERT-base at 64,
100 and 37 tokens matches onnxruntime to 1.3-1.6e-6 of the largest output,
and GPT-2 small (causal attention, exported with a symbolic sequence) at 64,
101 and 17 tokens to 1.6-2.0e-6, as the programs compiled for those
lengths do.

### Functions, control flow and run-time sizes

* **Operators ONNX defines as functions** (`ops/functions.py`): `Attention`,
  `RotaryEmbedding`, `LinearAttention`, `CausalConvWithState`, the losses
  (`SoftmaxCrossEntropyLoss`, `NegativeLogLikelihoodLoss`), the windows,
  `CenterCropPad`, `AffineGrid`, `SwiGLU`, `DynamicQuantizeLinear`.  The onnx
  package ships their definitions (a function body in the schema, or one it
  builds for the node's attributes and input types); the importer asks it for
  the node's body and writes the body's nodes in the node's place, through
  the same op library, so attention becomes the importer's matrix products
  and softmax and fusion sees through it.  **A model's own functions**
  (`model.functions`, exporters' repeated blocks) are inlined by
  `onnx.inliner` when the model is read.
* **`If`** (`ops/control.py`): a condition known when compiling (a constant,
  or computed from shapes) writes only the branch taken, which reads the values
  around the node by name.  A condition known only at run time compiles both
  branches and selects each output elementwise; that needs each output to
  have one shape and type in both branches (else its shape would depend on the
  data, and the importer says so).
* **`Scan`** (8 and 9+, any axes and directions) and **`Loop`** are unrolled
  when their steps are known when compiling and there are at most 64 (a scan's
  length is part of its inputs' shapes; a loop's trip count given as a graph
  input is specialised on): the steps compile to identical kernels, which
  share one compiled body.  Otherwise (more steps, a trip count or condition
  computed at run time, a body whose condition depends on the data) the node
  runs on the host around its body compiled as a model of its own (once per
  signature), step by step, through the split described next; the scan
  outputs are stacked from the steps taken.  In a branch or a function body,
  where the model cannot be split, a known loop is unrolled however long (up
  to 4096 steps).
* **Run-time sizes** (`ops/dynamic.py`, `importer.py`): `NonZero`, `Unique`,
  `NonMaxSuppression` and a `Compress` on a computed condition have outputs
  whose shapes depend on values.  With known inputs they fold like any node.
  Otherwise the model is split there: the graph before the node is compiled and
  run, the node runs on the host (NumPy, or onnx's reference evaluator for
  `Unique` and `NonMaxSuppression`), and the rest of the graph is compiled
  for the sizes it produced, once per distinct set of sizes (cached like any
  signature; the rest may split again).  Such a node inside a branch or a
  function body is refused.  `TopK` with a `k` computed at run time splits
  the same way, and so do three operators that are not tensor algebra:
  `TfIdfVectorizer` (n-gram counting) and the random `Bernoulli` and
  `RandomUniformLike` (NumPy's generator, as the definition draws; seeded by
  `seed`), run by onnx's reference evaluator.
* **Old opsets**: a model whose opset selects an operator version older than
  the op library implements (`Add-1` with `broadcast`) is converted by
  `onnx.version_converter` to the lowest opset that works; where the converter
  cannot, the refusal says why.

### Narrow and quantised types

* **bfloat16, float8 (E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ), float4 E2M1,
  int4/uint4/int2/uint2** (`narrow.py`): Stripe has no dtype for them, so
  each tensor is held exactly in a wider Tile type (float32; int8/uint8) with
  its ONNX type beside it, and crosses the program's boundary as an
  `ml_dtypes` array (converted exactly on the host).  A `Cast` (`CastLike`,
  `QuantizeLinear`) to one of them rounds in Tile as `ml_dtypes` converts
  (ties to even; each format's overflow rule; `saturate` clamps float8 as
  `onnx.numpy_helper.saturate_cast`); any other operator given narrow inputs
  computes in the wide type and rounds its results back, which is NumPy's
  arithmetic on `ml_dtypes` arrays.  Checked bit for bit against `ml_dtypes`
  on random float32 bit patterns.  Inside the program these tensors take the
  wide type's memory.  float8 E8M0 (a power-of-two scale type) converts as
  onnx's `to_float8e8m0`, with each `round_mode` (`up`, `down`, `nearest`).
* **Quantised models** (`ops/quantize.py`, `ops/integer.py`, `qdq.py`):
  `QuantizeLinear`/`DequantizeLinear` per tensor, per axis and blocked (scales
  known or computed), to and from (u)int8/16, float8, float4 and int4.
  Convolutions and matrix products run on **integer dot products**: a QDQ
  `Conv` (onnxruntime's `quantize_static`: `DequantizeLinear` of uint8/int8
  activations and of constant weights) is fused into one node, and it,
  `QLinearConv` and `MatMulInteger`/`QLinearMatMul` with constant weights
  become a `dot4` contraction over the activations' bytes viewed as int32
  words of four channels (`view_int`, no copy of values) and the weights
  packed when compiling; the CPU backend runs it as `vpdpbusd` where the CPU
  has VNNI (see `docs/cpu-backend.md`).  The activations' zero point is a
  constant sum of weights (per output pixel where padding leaves taps out),
  signed activations are shifted to unsigned and uint8 weights with zero point
  128 to signed; the scales and the bias are the kernel's epilogue.  The sums
  are exact, so a QDQ convolution matches the reference's float convolution of
  the dequantised values to float rounding, and `QLinearConv`/`MatMulInteger`
  its integers exactly.  A QDQ block stays in bytes between its kernels
  (`qdq.py`): a `QuantizeLinear` (per tensor, constant scale and zero point)
  that alone reads a QDQ convolution, directly or through a `Relu`, is folded
  into it, and the epilogue requantises with one multiply-add per element
  (`round(acc * sx*sw/sy + b/sy) + zy`, half to even, clamped; onnxruntime's
  `QLinearConv` multiplies too, the reference divides by `sy`, so a value within
  a float rounding of a tie may land one step away); an `Add` of two per-tensor
  `DequantizeLinear` results reads both operands' bytes, its `QuantizeLinear`
  folded the same way (`QLinearAdd`'s arithmetic), so a residual block's sum
  joins its last convolution's kernel reading 1 byte per element of the
  shortcut, where the nodes as written store and read a float32 copy; and a
  `MaxPool` between a `DequantizeLinear` and a `QuantizeLinear` of one
  positive scale and zero point pools the bytes.  Grouped and depthwise convolutions, weights with non-zero zero
  points and scales computed at run time keep the float convolution of the
  dequantised values (the same numbers, float speed).  Measured in
  `docs/performance.md`: a quantised ResNet-50 in two-thirds of its float
  model's time.
* **DFT and STFT** (`ops/spectral.py`): one contraction with a constant
  twiddle tensor each (summed in float64), an STFT reading its frames through
  an affine index; a matrix DFT, quadratic in the transform's length.

## What a model must be

A model is checked when it is read (`stripeml.onnx.compile`, `prepare`), in
time linear in its size; each problem is an `OnnxError` naming the file, node,
initializer or input (`load.py` reads, `validate.py` checks):

* **The file.** A regular, non-empty file that parses as a `ModelProto`; a
  truncated or corrupt file is an error, and so is one cut where the bytes
  still parse (it then lacks its IR version, graph or opset import).  A model
  given by path is read once: the initializers' raw bytes (of the plain
  numeric types, above 4 KB) go from the file straight into arrays, and only
  the rest, the graph's structure, is parsed by protobuf (`wire.py`;
  `onnx.load` and the message's own copy held a BERT-base's 440 MB three
  times, and took 1.3-2.3 s to its first result where reading by path takes
  0.5-0.7 s, warm cache).  Those bytes are read on a thread of their own
  (`wire.start_split`) while the import goes on with the structure, its
  checks and the target, and the import waits for them before anything
  reads a weight's value; a file that changes meanwhile is the same
  `OnnxError`.  `f.model` is then read again, whole, when first asked for.
* **External data** is read only from regular files inside the model's folder:
  a `location` that is absolute, climbs out with `..` or resolves (through
  symbolic links) outside the folder is refused, as are an `offset`/`length`
  past the end of the file and a byte count that does not match the tensor's
  shape.  A `ModelProto` passed in memory has no folder: a tensor in it that
  still says its data is external is refused (load the model by path).
* **The model.** An IR version from 1 to the newest the installed `onnx`
  knows; a graph with at least one node and one output.
* **Opsets.** One `ai.onnx` import, from opset 7 (when the binary operators
  took NumPy broadcasting) to the newest the installed `onnx` knows; the error
  names that range.  A model whose graph has only nodes of other domains (an
  `ai.onnx.ml` `TreeEnsemble` alone) may leave it out.  Below opset 7 a node
  is accepted only where its operator has not changed since (`Not` of opset
  1), where the op library implements the older definition (`Pad`'s
  `paddings`, `Reshape`'s `shape` attribute, `Clip`'s `min`/`max` attributes,
  `PRelu`'s per-channel slope, `Dropout`'s `is_test`: `oldest` in the
  registry), or once `onnx.version_converter` converted the model (above);
  likewise an `ai.onnx.ml` operator against that domain's opset
  (`TreeEnsemble` needs 5, `LabelEncoder` 2).  Each domain is imported once,
  and only domains `onnx` knows (`ai.onnx.ml`, `ai.onnx.preview` ...) or that
  a function of the model defines; a node's operator must exist in the opset,
  and `onnx.checker.check_node` must accept it (attribute types, unknown
  attributes, input and output counts).
* **Initializers and tensor attributes** hold exactly the values their
  shape declares, with non-negative dimensions and unique names.
* **Graph inputs** have a tensor type with an element type; their dimensions
  are non-negative and neither one nor their product exceeds 2^40 elements
  (the same bound applies to every tensor an operator makes: a `Tile` or
  `Pad` to a larger shape is an error naming the node, and so is a constant
  folded at import that does not fit in memory).
* **Nodes** are in single assignment form (no tensor produced twice, none
  named like a graph input or initializer) and in topological order; every
  graph output is produced by a node, an initializer or an input.

Values the schema allows but an operator cannot take (a `Range` to infinity,
`LpPool` with `p = 0`, a `ConstantOfShape` of negative shape) are errors
naming the node, raised when the node is written (at the first call); any
exception an op writer did not anticipate becomes an `OnnxError` naming the
node, the original chained as its cause.
Tensors with a dimension of size 0 are constants (their value is known from
the shape), so they never reach the compiled program.

## How some operators are lowered

**Resize and Upsample** (`ops/resize.py`).  The `scales`, `sizes` and `roi`
inputs must be known when compiling, so where each output samples the input
and with which weights is planned in NumPy, per resized axis, following the
ONNX reference implementation (`onnx.reference.ops.op_resize`) operation for
operation: every `mode`, `nearest_mode`, `coordinate_transformation_mode`,
`cubic_coeff_a`, `exclude_outside`, `antialias`, `axes` and
`keep_aspect_ratio_policy`.  The axes are then resized one after the other.
`linear` and `cubic` on floats: one contraction per axis with a constant
interpolation matrix, `Y[.., o, ..] = +(X[.., i, ..] * A[o, i])` (in float32,
or float64 for float64 data), so each output costs one multiply-add per input
position of its row.  `nearest`: a copy, an affine `=` contraction where the
source positions are a progression or a repetition (`Y[2 * t + r] = X[t]`),
else a `gather` of constant indices, exact for every element type.  `linear`
and `cubic` on integers: the taps are gathered, weighted and summed in
float64 in the reference's order, then rounded half to even and saturated,
bit for bit the reference's result.  `tf_crop_and_resize` gives positions
outside the input the `extrapolation_value` (a select after each axis).
Resize-10 and Upsample read coordinates as onnxruntime does (`asymmetric`;
`nearest` floors where an axis grows and rounds up where it shrinks).
A NaN or infinity in the input of a float `linear`/`cubic` resize spreads
along the whole row of the matrix product.

**RNN, GRU and LSTM** (`ops/recurrent.py`).  The sequence length is part of
the input's shape, so the time loop is unrolled when compiling.  The input
projection `X W^T + Wb + Rb` of every step and direction is one contraction
before the loop, a `[seq, batch, directions, gates * hidden]` GEMM (constant
weights stored input-major once), as cuDNN and onnxruntime do it.  Each step
is then `H[t-1] R^T` for all gates as one contraction (the step's row of the
projection, read through a view, added as its epilogue) and one
elementwise kernel of gate math, which writes the step's row of `Y` in place
(`alias_copy`; the next step reads its state there).  Those kernels differ
only in buffer names and in which rows they read and write, offsets the
canonical form takes out, so the CPU backend compiles one body for each and
direction and every step calls it: no copy is left per step (a 2-layer
LSTM of 32 steps: 262 kernels per run before, 136 now).  `sequence_lens` must be known when
compiling (a static input): unequal lengths add a constant mask per step
that freezes finished sequences (their rows of `Y` are 0, `Y_h`/`Y_c` keep
their last step, 0 for a length of 0), and a reverse direction then reads
its rows of X and writes those of Y in processing order, through one `=` copy
per batch entry each way with its time reversed within its length, from a
buffer whose time axis starts with `seq` rows of zeros (X copied after them;
Y's steps written from row `seq` on), so that every copy reads in bounds, a
time past the length reads a zero row, and the copies differ only in offsets
and share one compiled body: native kernels, where a `gather` is a host step
of 13-22 us.  Past 16 batch entries it is one `gather` of constant indices
each way.  A bidirectional GRU 64 -> 128 of 32 steps with lengths 32 and 20
went from 383-422 to 314-321 us per call on one thread (onnxruntime 304-307),
the LSTM of the same sizes from 476-508 to 381-392 us (onnxruntime 320-337).
The formulas are onnx's reference
implementation's; `activations` (alpha and beta consumed in order by the
functions that take them), `clip` (on each gate's input to its activation),
`input_forget` and `sequence_lens`, which it ignores, follow the
specification and onnxruntime.

**TreeEnsemble** (`ops/ml.py`, domain `ai.onnx.ml`).  The trees are
attributes, so their nodes and leaves become constant tables, a leaf an
entry that leads to itself and a set-membership node a chain of equality
tests.  Every (sample, tree) pair walks its tree at once, in as many steps as
the deepest tree has levels: each step gathers the current entry's feature,
threshold and comparison, the sample's feature value, and the next entry.
The leaves reached are looked up in a table of weights per target and summed
(or averaged, or their minimum or maximum taken) over the trees in float64.
Only `post_transform` NONE is accepted: the ONNX reference ignores the
attribute and onnxruntime reads its SOFTMAX and LOGISTIC codes swapped.

**Det** (`ops/misc.py`).  Gaussian elimination with partial pivoting, as
LAPACK's `getrf` under `numpy.linalg.det`, unrolled over the columns of the
matrix (its size is known when compiling; at most 64): per column a max and
a min contraction find the first largest pivot, a `gather` reads its row,
and one elementwise statement swaps it in and eliminates below it, in
float64 (as NumPy computes a float32 determinant), rounded once at the end.

**GridSample, RoiAlign and DeformConv** (`ops/sampling.py`).  Where they
read the input depends on run-time values (the grid, the rois, the
offsets), so the taps are computed elementwise in Tile, as the ONNX reference
implementations compute them: each sample's coordinate per spatial axis (in
float32), its integer taps (`floor(x) + k`, one, two or four per axis) and
their weights, and the padding (`border` clamps, `reflection` reflects in
float64, `zeros` marks a tap invalid); the tap axes of the spatial axes
broadcast into one flat position per tap.  The input is laid out once as
rows of channels, one row per (batch, pixel) plus a row of zeros that
invalid taps read, so one `gather` copies every tap's channels and one
contraction sums the weighted taps (RoiAlign `max`: takes their maximum;
DeformConv: then a grouped convolution of the sampled columns with the
weights).  The gathered taps are materialised (samples x taps x channels).
RoiAlign's batch indices are checked when the model runs (an
`ExecutionError` outside `-N .. N-1`); its adaptive `sampling_ratio` 0 needs
`ceil(roi size / output size)` samples per bin, a count that depends on the
rois' values, so the rois must then be known when compiling (initializers
or constants; not a static input, which would specialise every model on
its rois and fold what computes them).

## Supported operators
"""


def render() -> str:
    ops = [d for d in supported_ops() if not d.name.startswith("_")]
    counts: dict[str, int] = {}
    for d in ops:
        counts[d.domain or "ai.onnx"] = counts.get(d.domain or "ai.onnx", 0) + 1
    per = ", ".join(f"{k} of domain `{dom}`" for dom, k in counts.items())
    lines = [HEADER, f"{len(ops)} operators: {per}.\n"]
    lines.append("| operator | domain | supported | static inputs |")
    lines.append("|---|---|---|---|")
    for d in ops:
        doc = d.doc
        if doc.startswith(d.name + ":"):
            doc = doc[len(d.name) + 1 :].strip()
        doc = doc.replace("|", "\\|")
        static = ", ".join(str(i) for i in d.static) or ""
        lines.append(f"| {d.name} | {d.domain or 'ai.onnx'} | {doc} | {static} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
