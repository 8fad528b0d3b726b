// ref-flash on the CPU, the AVX-512 path: the loop over work items, the fp32 packing and
// products, masking and the online softmax; bf16 inputs take the AVX512_BF16 packing and
// products of cpu_flash_avx512_bf16.cpp inside the same loop.
//
// One work item is one (batch, head, query tile of 96 rows). Key/value tiles of 128 keys stream
// through it; for each, every block of 6 query rows runs Q.K^T (register blocks of 6 x 64
// scores, 24 zmm accumulators), the online softmax on those 6 rows (vectorised exp2, log2(e)
// folded into the scale), and P.V into the block's rows of the fp32 accumulator, whose old value
// is scaled by the rows' rescale factors as it is loaded (no separate rescale pass). The packed
// key/value tiles of one head stay in L2 while the 16 row blocks of a query tile reuse them.
// The bf16 path is the same loop over bf16 pairs with vdpbf16ps (fp32 accumulation); softmax
// and the accumulator stay fp32. On one Zen 4 core this runs at 68-82% of the fp32 FMA peak
// and 53-78% of the vdpbf16ps peak (kernels_flash_vs_torch --cpu-time, BENCHMARKS.md). The AMX
// path is the bf16 path with blocks of 32 query rows and 512 keys per softmax step, whose two
// products run on tiles (cpu_flash_amx.cpp).
//
// Every function here carries its own target attribute and is reached only after
// cpu_isa() said yes, so one binary still runs on CPUs without AVX-512.
#include "kernels/attention_core.hpp"
#include "kernels/cpu_flash_avx512.hpp"
#include "kernels/parallel_for.hpp"

#ifdef SDPA_X86_PATHS

#include <algorithm>
#include <cmath>
#include <vector>

namespace sdpa_doctor::kernels::cpu_flash_detail {
namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// K and V of every (batch, kv head), repacked once per call:
//  fp32: K^T per tile (de x 128), de = d rounded up to a pair. V is read where it lies when d is
//        a multiple of 16 (P.V reads whole 16-float vectors of a row), else packed per tile as
//        (128 x dp), dp = d rounded up to 16.
//  bf16: pairs along the reduction, as vdpbf16ps takes them: K per tile as (de/2 x 128 x 2),
//        element (e2, j, k) = K[j0 + j][2 e2 + k]; V per tile as (64 x dp x 2), element
//        (j2, c, k) = V[j0 + 2 j2 + k][c]. The AMX path the same, with de = d rounded up to 32
//        (whole 16-pair tile rows).
// Zeros past Lkv and past d, so that padded lanes add nothing.
struct PackedX {
  int64_t tiles = 0;
  int64_t d2 = 0;       // d rounded up to a pair (AMX: to 32), halved
  int64_t dp = 0;       // V columns: d rounded up to 16
  bool v_direct = false; // fp32 V read in place
  std::vector<float> kt, v;
  std::vector<uint16_t> kb, vb;
  int64_t k_tile_elems() const { return d2 * 2 * k_x_tile_kv; }
  int64_t v_tile_elems() const { return k_x_tile_kv * dp; }
};

// K^T of one fp32 tile: kt[e][j] = K[j][e], de x 128, zeros past cols and d.
SDPA_AVX512 void pack_k_f32(const float* k, int64_t ldk, int64_t cols, int64_t d, int64_t de,
                            float* kt) {
  for (int64_t e0 = 0; e0 < de; e0 += 16) {
    const __mmask16 in_d = first_lanes(d - e0);
    for (int64_t j0 = 0; j0 < k_x_tile_kv; j0 += 16) {
      __m512i r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = j0 + i < cols ? _mm512_maskz_loadu_epi32(in_d, k + (j0 + i) * ldk + e0)
                             : _mm512_setzero_si512();
      transpose16(r);
      for (int64_t c = 0; c < 16 && e0 + c < de; ++c)
        _mm512_storeu_si512(kt + (e0 + c) * k_x_tile_kv + j0, r[c]);
    }
  }
}

// V of one fp32 tile when it cannot be read in place: rows padded to dp, zeros past cols.
SDPA_AVX512 void pack_v_f32(const float* v, int64_t ldv, int64_t cols, int64_t d, int64_t dp,
                            float* vt) {
  for (int64_t j = 0; j < k_x_tile_kv; ++j)
    for (int64_t c0 = 0; c0 < dp; c0 += 16)
      _mm512_storeu_ps(vt + j * dp + c0, j < cols ? _mm512_maskz_loadu_ps(first_lanes(d - c0),
                                                                          v + j * ldv + c0)
                                                  : _mm512_setzero_ps());
}

void pack_tile_x(const AttnParams& p, PackedX& pk, bool bf16, int64_t item) {
  const int64_t bk = item / pk.tiles;
  const int64_t t = item % pk.tiles;
  const int64_t b = bk / p.hkv;
  const int64_t hk = bk % p.hkv;
  const int64_t j0 = t * k_x_tile_kv;
  const int64_t cols = std::min(k_x_tile_kv, p.lkv - j0);
  const float* k = static_cast<const float*>(p.k) + b * p.k_stride_b + hk * p.k_stride_h +
                   j0 * p.k_stride_l;
  const float* v = static_cast<const float*>(p.v) + b * p.v_stride_b + hk * p.v_stride_h +
                   j0 * p.v_stride_l;
  if (bf16) {
    pack_k_bf16(k, p.k_stride_l, cols, p.d, pk.d2, pk.kb.data() + item * pk.k_tile_elems());
    pack_v_bf16(v, p.v_stride_l, cols, p.d, pk.dp, pk.vb.data() + item * pk.v_tile_elems());
  } else {
    pack_k_f32(k, p.k_stride_l, cols, p.d, 2 * pk.d2, pk.kt.data() + item * pk.k_tile_elems());
    if (!pk.v_direct)
      pack_v_f32(v, p.v_stride_l, cols, p.d, pk.dp, pk.v.data() + item * pk.v_tile_elems());
  }
}

// The pack buffers for p, sized; pack_tile_x fills them. They survive across calls (per calling
// thread): a new 30 MiB vector per call pays for its page faults every time. Every element is
// written, pads included, so they need no clearing.
PackedX& packed_buffers(const AttnParams& p, X86Kind kind) {
  thread_local PackedX cache;
  PackedX& pk = cache;
  const bool bf16 = kind != X86Kind::f32;
  pk.tiles = (p.lkv + k_x_tile_kv - 1) / k_x_tile_kv;
  pk.d2 = round_up(p.d, kind == X86Kind::amx ? 32 : 2) / 2;
  pk.dp = round_up(p.d, 16);
  pk.v_direct = !bf16 && p.d % 16 == 0;
  const int64_t n_tiles = p.b * p.hkv * pk.tiles;
  const size_t k_elems = size_t(n_tiles * pk.k_tile_elems());
  const size_t v_elems = pk.v_direct ? 0 : size_t(n_tiles * pk.v_tile_elems());
  if (bf16) {
    pk.kb.resize(k_elems);
    pk.vb.resize(v_elems);
  } else {
    pk.kt.resize(k_elems);
    pk.v.resize(v_elems);
  }
  return pk;
}

// 2^x for x <= 0 (or a rounding above), sixteen lanes, within 2 ulp: n = round(x), 2^(x - n)
// by the Cephes exp2f polynomial on [-0.5, 0.5], vscalefps for the 2^n. Fewer operations than
// exp (no Cody-Waite split); the caller folds log2(e) into the scale. Below -150, and -inf,
// give 0 (2^-150 rounds to 0).
SDPA_AVX512 SDPA_INLINE __m512 exp2_512(__m512 x) {
  const __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(-150.0f));
  const __m512 n = _mm512_roundscale_ps(xc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(xc, n);
  __m512 q = _mm512_set1_ps(1.535336188319500e-4f);
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.339887440266574e-3f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(9.618437357674640e-3f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(5.550332471162809e-2f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(2.402264791363012e-1f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(6.931472028550421e-1f));
  q = _mm512_fmadd_ps(q, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(q, n);
}

// acc += A[6 x depth] . B[depth x 16 NV], fp32; A rows lda apart, B rows ldb apart.
template <int NV>
SDPA_AVX512 SDPA_INLINE void fma_block(const float* a, int64_t lda, const float* b, int64_t ldb,
                                       int64_t depth, AccBlock<NV>& acc) {
  for (int64_t e = 0; e < depth; ++e) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int x = 0; x < NV; ++x) bv[x] = _mm512_loadu_ps(b + e * ldb + 16 * x);
#pragma GCC unroll 6
    for (int r = 0; r < k_x_rows; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + e]);
#pragma GCC unroll 4
      for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_fmadd_ps(av, bv[x], acc[r][x]);
    }
  }
}

// S[6 x 16 NV] = Q[6 x d] . K^T[d x 16 NV], fp32; K^T rows ldk apart, S rows k_x_tile_kv
// apart. NV = 4 but where causal masking leaves fewer keys to compute.
template <int NV>
SDPA_AVX512 void qk_f32(const float* q, int64_t ldq, const float* kt, int64_t ldk, int64_t d,
                        float* s) {
  AccBlock<NV> acc;
  zero_block<NV>(acc);
  fma_block<NV>(q, ldq, kt, ldk, d, acc);
  store_block<NV>(acc, s, k_x_tile_kv);
}

// Q.K^T for the first `keys` keys of a tile, in register blocks of 64 keys; the last block
// only as many 16-key vectors as it needs. Lanes past them keep stale values: the caller's mask
// drops them (keys < 128 makes a block not all_visible).
SDPA_AVX512 void qk_keys(bool bf16, const float* q, const uint16_t* qb, int64_t ldq,
                         const float* kt, const uint16_t* kb, int64_t d, int64_t d2, int64_t keys,
                         float* s) {
  for (int64_t j0 = 0; j0 < keys; j0 += k_x_qk_keys) {
    const int64_t nv = std::min<int64_t>(4, (keys - j0 + 15) / 16);
    float* sj = s + j0;
    if (bf16) {
      const uint16_t* k = kb + 2 * j0;
      qk_bf16_keys(nv, qb, ldq, k, k_x_tile_kv, d2, sj);
    } else {
      const float* k = kt + j0;
      switch (nv) {
      case 1: qk_f32<1>(q, ldq, k, k_x_tile_kv, d, sj); break;
      case 2: qk_f32<2>(q, ldq, k, k_x_tile_kv, d, sj); break;
      case 3: qk_f32<3>(q, ldq, k, k_x_tile_kv, d, sj); break;
      default: qk_f32<4>(q, ldq, k, k_x_tile_kv, d, sj); break;
      }
    }
  }
}

// O[6 x 16 NV] = O * alpha (per row) + P[6 x depth] . V[depth x 16 NV], fp32; P rows
// k_x_tile_kv apart, v at the chunk's first column of a tile row, rows ldv apart.
template <int NV>
SDPA_AVX512 SDPA_INLINE void pv_f32_chunk(const float* p, const float* v, int64_t ldv,
                                          int64_t depth, float* o, int64_t ldo,
                                          const float* alpha) {
  AccBlock<NV> acc;
  load_scaled_block<NV>(acc, o, ldo, alpha);
  fma_block<NV>(p, k_x_tile_kv, v, ldv, depth, acc);
  store_block<NV>(acc, o, ldo);
}

// All dp columns (a multiple of 16) of O; V rows ldv apart.
SDPA_AVX512 void pv_f32(const float* p, const float* vt, int64_t ldv, int64_t dp, int64_t depth,
                        float* o, int64_t ldo, const float* alpha) {
  int64_t c0 = 0;
  for (; c0 + 64 <= dp; c0 += 64) pv_f32_chunk<4>(p, vt + c0, ldv, depth, o + c0, ldo, alpha);
  switch ((dp - c0) / 16) {
  case 1: pv_f32_chunk<1>(p, vt + c0, ldv, depth, o + c0, ldo, alpha); break;
  case 2: pv_f32_chunk<2>(p, vt + c0, ldv, depth, o + c0, ldo, alpha); break;
  case 3: pv_f32_chunk<3>(p, vt + c0, ldv, depth, o + c0, ldo, alpha); break;
  default: break;
  }
}

// Where one row block meets one key tile.
struct BlockView {
  int64_t i0 = 0;      // absolute index of the block's first query row
  int64_t valid = 0;   // rows of the block that exist (the rest are padding)
  int64_t j0 = 0;      // absolute index of the tile's first key
  int64_t cols = 0;    // keys of the tile that exist
  bool all_visible = false; // no mask, whole tile, no causal cut: the plain softmax
};

// Applies scale, causal cut, tile end and mask to the first nvec 16-key vectors of the raw
// scores of the n_rows rows (ld floats apart) of a block that is not all_visible, in place
// (core::masked_score lane by lane): dropped keys and padding rows -> -inf. Lanes Q.K^T did not compute (past the block's last visible
// key) are dropped here too, whatever they hold.
SDPA_AVX512 void mask_block(const AttnParams& p, const float* mask, const BlockView& bv,
                            int64_t n_rows, int64_t ld, int64_t nvec, float* s) {
  const __m512 scale = _mm512_set1_ps(p.scale);
  const __m512 ninf = _mm512_set1_ps(core::neg_inf());
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = s + r * ld;
    const int64_t i = bv.i0 + r;
    // Keys j < limit are visible before the mask: inside the tile and, with causal,
    // j0 + j <= i + offset. Padding rows see nothing.
    int64_t limit = r < bv.valid ? bv.cols : 0;
    if (p.causal) limit = std::min(limit, i + p.causal_offset - bv.j0 + 1);
    limit = std::max<int64_t>(limit, 0);
    const float* mrow = mask && r < bv.valid ? mask + i * p.mask_stride_q + bv.j0 : nullptr;
    for (int v = 0; v < nvec; ++v) {
      const __m512i j = _mm512_add_epi32(iota, _mm512_set1_epi32(16 * v));
      __mmask16 keep = _mm512_cmplt_epi32_mask(j, _mm512_set1_epi32(int32_t(limit)));
      __m512 x = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * v), scale);
      if (mrow) {
        // Masked load: the mask row ends at Lkv, which may fall inside the tile.
        const __mmask16 in_row = _mm512_cmplt_epi32_mask(j, _mm512_set1_epi32(int32_t(bv.cols)));
        const __m512 m = _mm512_maskz_loadu_ps(in_row, mrow + 16 * v);
        if (p.mask_kind == MaskKind::additive) x = _mm512_add_ps(x, m);
        else keep &= _mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_NEQ_UQ);
      }
      _mm512_storeu_ps(row + 16 * v, _mm512_mask_mov_ps(ninf, keep, x));
    }
  }
}

// Sixteen finite floats rounded to bf16, nearest even (as vcvtneps2bf16 does, without needing
// AVX512_BF16 here).
SDPA_AVX512 SDPA_INLINE __m256i to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16));
}

// Online softmax over the first nvec 16-key vectors of the n_rows rows (ld floats apart) of
// scores in s (the rest no row of the block sees, and P.V does not read), in place: s becomes
// the unnormalised probabilities 2^(score * scale * log2(e) - row max) against the updated row
// maxima, alpha[r] the factor row r's accumulator must be scaled by. During the loop
// RowState::max is in base-2 units (natural max times log2(e)); the row sums stay as 16 lane sums
// per row (lane_sum, n_rows x 16): a horizontal add per row and tile would cost as much as the
// exps. The caller turns both back at the end. The three phases give the out-of-order core six independent chains.
// With pb (rows ld apart), the probabilities go there rounded to bf16 instead of into s.
SDPA_AVX512 void softmax_block(const AttnParams& p, const float* mask, const BlockView& bv,
                               int64_t n_rows, int64_t ld, int64_t nvec, float* s,
                               core::RowState* state, float* lane_sum, float* alpha,
                               uint16_t* pb = nullptr) {
  constexpr float log2e = 1.44269504088896341f;
  float scale = p.scale * log2e;
  if (!bv.all_visible) {
    mask_block(p, mask, bv, n_rows, ld, nvec, s); // scaled and masked now
    scale = log2e;
  }
  // Row maxima of the raw scores; scale > 0 and rounding is monotonic, so max(x) * scale is
  // the max of the scaled scores.
  float tile_max[k_amx_rows];
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = s + r * ld;
    __m512 m = _mm512_loadu_ps(row);
    for (int v = 1; v < nvec; ++v) m = _mm512_max_ps(m, _mm512_loadu_ps(row + 16 * v));
    tile_max[r] = _mm512_reduce_max_ps(m) * scale;
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    core::RowState& st = state[r];
    alpha[r] = 1.0f;
    // exp only when the max moves, which after the first few tiles is rare.
    if (tile_max[r] > st.max) {
      alpha[r] = std::exp2(st.max - tile_max[r]); // 0 when st.max is -inf
      st.max = tile_max[r];
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = s + r * ld;
    const core::RowState& st = state[r];
    if (st.max == core::neg_inf()) { // nothing visible yet: no probabilities, no NaN
      if (pb) std::fill_n(pb + r * ld, 16 * nvec, uint16_t(0));
      else std::fill_n(row, 16 * nvec, 0.0f);
      continue;
    }
    const __m512 neg_max = _mm512_set1_ps(-st.max);
    __m512 sum = _mm512_mul_ps(_mm512_loadu_ps(lane_sum + 16 * r), _mm512_set1_ps(alpha[r]));
    for (int v = 0; v < nvec; ++v) {
      const __m512 e = exp2_512(_mm512_fmadd_ps(_mm512_loadu_ps(row + 16 * v), sc, neg_max));
      sum = _mm512_add_ps(sum, e);
      if (pb) _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + r * ld + 16 * v), to_bf16(e));
      else _mm512_storeu_ps(row + 16 * v, e);
    }
    _mm512_storeu_ps(lane_sum + 16 * r, sum);
  }
}

struct ScratchX {
  std::vector<float> q, o, s, alpha, lane_sum;
  std::vector<uint16_t> qb, pb;
  std::vector<core::RowState> state;
};

// One (batch, head, query tile) on the AVX-512 path, with the products of `kind`. The AMX path
// runs blocks of 32 rows through the tiles (configured by the caller); the others blocks of 6.
SDPA_AVX512 void flash_item_x86(const AttnParams& p, const PackedX& pk, X86Kind kind, int64_t bh,
                                int64_t qt, ScratchX& w) {
  const bool bf16 = kind != X86Kind::f32;
  const bool amx = kind == X86Kind::amx;
  const int64_t block_rows = amx ? k_amx_rows : k_x_rows;
  const int64_t b = bh / p.hq;
  const int64_t h = bh % p.hq;
  const int64_t bk = b * p.hkv + h / (p.hq / p.hkv);
  const int64_t d = p.d, dp = pk.dp, d2 = pk.d2;
  const int64_t i0 = qt * k_x_tile_q;
  const int64_t rows = std::min(k_x_tile_q, p.lq - i0);
  const int64_t rows_pad = round_up(rows, block_rows);
  const int64_t ldq = 2 * d2; // Q rows padded to a whole pair (fp32 too: one layout to reason about)

  const float* q = static_cast<const float*>(p.q) + b * p.q_stride_b + h * p.q_stride_h;
  float* o = static_cast<float*>(p.o) + b * p.o_stride_b + h * p.o_stride_h;
  const float* mask = p.mask_kind == MaskKind::none ? nullptr : p.mask + b * p.mask_stride_b;
  const float* v_head = static_cast<const float*>(p.v) + b * p.v_stride_b +
                        (bk % p.hkv) * p.v_stride_h;

  if (bf16) {
    w.qb.assign(size_t(rows_pad * ldq), 0);
    w.pb.resize(size_t((amx ? rows_pad * k_amx_kv : block_rows * k_x_tile_kv)));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t e = 0; e < d; ++e)
        w.qb[size_t(r * ldq + e)] = bf16_bits(q[(i0 + r) * p.q_stride_l + e]);
  } else {
    w.q.assign(size_t(rows_pad * ldq), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(q + (i0 + r) * p.q_stride_l, d, w.q.data() + r * ldq);
  }
  w.o.assign(size_t(rows_pad * dp), 0.0f);
  // AMX: the scores and factors of every block of the item at once (the tile products run over
  // all blocks); the others: one block's.
  w.s.resize(size_t(amx ? rows_pad * k_amx_kv : block_rows * k_x_tile_kv));
  w.alpha.resize(size_t(amx ? rows_pad : block_rows));
  w.state.assign(size_t(rows_pad), core::row_start());
  w.lane_sum.assign(size_t(rows_pad * 16), 0.0f);

  const int64_t last_row = i0 + rows - 1;
  // AMX: one softmax step over k_amx_kv keys (several packed tiles): the tile products then
  // run long reductions between the loads and stores of O. The others: one tile.
  const int64_t width = amx ? k_amx_kv : k_x_tile_kv;
  const int64_t step = width / k_x_tile_kv;
  for (int64_t t = 0; t < pk.tiles; t += step) {
    BlockView bv;
    bv.j0 = t * k_x_tile_kv;
    // Causal tile skipping: no row of this query tile sees any key from here on.
    if (p.causal && bv.j0 > last_row + p.causal_offset) break;
    bv.cols = std::min(width, p.lkv - bv.j0);
    const int64_t tile = bk * pk.tiles + t;
    const float* kt = bf16 ? nullptr : pk.kt.data() + tile * pk.k_tile_elems();
    const uint16_t* kb = bf16 ? pk.kb.data() + tile * pk.k_tile_elems() : nullptr;
    const float* v_tile = pk.v_direct ? v_head + bv.j0 * p.v_stride_l
                          : bf16      ? nullptr
                                      : pk.v.data() + tile * pk.v_tile_elems();
    const int64_t v_ld = pk.v_direct ? p.v_stride_l : dp;
    // The view of the block at row rb of the item; the keys it may see (0: none of this tile).
    const auto view = [&](int64_t rb, BlockView& out) {
      out = bv;
      out.i0 = i0 + rb;
      out.valid = std::min(block_rows, rows - rb);
      const int64_t block_last = out.i0 + out.valid - 1;
      int64_t depth = out.cols;
      if (p.causal) {
        if (out.j0 > block_last + p.causal_offset) return int64_t(0);
        depth = std::min(depth, block_last + p.causal_offset - out.j0 + 1);
      }
      out.all_visible = p.mask_kind == MaskKind::none && out.cols == width &&
                        out.valid == block_rows &&
                        (!p.causal || out.j0 + width - 1 <= out.i0 + p.causal_offset);
      return depth;
    };
    if (amx) {
      // Tiles take 32 keys at a time: scores past a block's depth are masked away by
      // softmax_block, which writes the probabilities as bf16 for P.V, and those of an odd last
      // 16-key vector, which it does not write, are zeroed.
      constexpr int64_t k_blocks = k_x_tile_q / k_amx_rows;
      const int64_t blocks = rows_pad / k_amx_rows;
      int64_t keys32[k_blocks] = {};
      BlockView views[k_blocks];
      int64_t depths[k_blocks] = {};
      for (int64_t blk = 0; blk < blocks; ++blk) {
        depths[blk] = view(blk * k_amx_rows, views[blk]);
        keys32[blk] = round_up(depths[blk], 32);
      }
      qk_amx(w.qb.data(), ldq, kb, pk.k_tile_elems(), d2, blocks, keys32, w.s.data());
      for (int64_t blk = 0; blk < blocks; ++blk) {
        if (keys32[blk] == 0) continue;
        const int64_t rb = blk * k_amx_rows, nvec = (depths[blk] + 15) / 16;
        uint16_t* pb_block = w.pb.data() + rb * k_amx_kv;
        softmax_block(p, mask, views[blk], k_amx_rows, k_amx_kv, nvec,
                      w.s.data() + rb * k_amx_kv, w.state.data() + rb,
                      w.lane_sum.data() + 16 * rb, w.alpha.data() + rb, pb_block);
        if (nvec * 16 < keys32[blk])
          for (int64_t r = 0; r < k_amx_rows; ++r)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb_block + r * k_amx_kv + nvec * 16),
                                _mm256_setzero_si256());
      }
      pv_amx(w.pb.data(), pk.vb.data() + tile * pk.v_tile_elems(), pk.v_tile_elems(), dp,
             blocks, keys32, w.o.data(), dp, w.alpha.data());
      continue;
    }
    for (int64_t rb = 0; rb < rows_pad; rb += block_rows) {
      BlockView view_rb;
      const int64_t depth = view(rb, view_rb); // keys any row of the block may see
      if (depth == 0) continue; // causal: later blocks see more, so no break
      float* o_block = w.o.data() + rb * dp;
      const int64_t nvec = (depth + 15) / 16;
      qk_keys(bf16, bf16 ? nullptr : w.q.data() + rb * ldq,
              bf16 ? w.qb.data() + rb * ldq : nullptr, ldq, kt, kb, d, d2, depth, w.s.data());
      softmax_block(p, mask, view_rb, k_x_rows, k_x_tile_kv, nvec, w.s.data(),
                    w.state.data() + rb, w.lane_sum.data() + 16 * rb, w.alpha.data());
      if (bf16)
        pv_bf16(w.s.data(), w.pb.data(), pk.vb.data() + tile * pk.v_tile_elems(), dp,
                (depth + 1) / 2, o_block, dp, w.alpha.data());
      else
        pv_f32(w.s.data(), v_tile, v_ld, dp, depth, o_block, dp, w.alpha.data());
    }
  }

  for (int64_t r = 0; r < rows; ++r) {
    core::RowState& st = w.state[size_t(r)];
    st.sum = _mm512_reduce_add_ps(_mm512_loadu_ps(w.lane_sum.data() + 16 * r));
    st.max *= 0.693147180559945309f; // back from base 2 (-inf stays -inf)
    write_output_row(p, st, w.o.data() + r * dp, b, h, i0 + r, o);
  }
}

} // namespace

void x86_flash(const AttnParams& p, X86Kind kind, int threads) {
  const int64_t q_tiles = (p.lq + k_x_tile_q - 1) / k_x_tile_q;
  const bool bf16 = kind != X86Kind::f32;
  // A local name: the threads must see the calling thread's buffers, not their own.
  PackedX& packed = packed_buffers(p, kind);
  std::vector<ScratchX> scratch(static_cast<size_t>(threads));
  // Head by head, so that the threads stream the same packed K/V at the same time and share it
  // in L3 (head-interleaved items made each thread stream a different head: 10% slower at
  // L=2048 with other processes on the cores). Within a head the last query tiles come first:
  // under causal masking they carry the most keys, so the small ones even out the end.
  // Packing and the items share one start of the threads (parallel_for_two_phase).
  parallel_for_two_phase(
      p.b * p.hkv * packed.tiles,
      [&](int64_t tile, int) { pack_tile_x(p, packed, bf16, tile); }, p.b * p.hq * q_tiles,
      [&](int64_t item, int worker) {
        const int64_t qt = q_tiles - 1 - item % q_tiles;
        // The tile configuration is per thread; released after each item, so no thread leaves
        // this call holding tile state.
        if (kind == X86Kind::amx) amx_tiles_configure();
        flash_item_x86(p, packed, kind, item / q_tiles, qt, scratch[size_t(worker)]);
        if (kind == X86Kind::amx) amx_tiles_release();
      },
      threads);
}


} // namespace sdpa_doctor::kernels::cpu_flash_detail

#endif // SDPA_X86_PATHS
