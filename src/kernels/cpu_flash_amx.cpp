// ref-flash on the CPU, the AMX half of the bf16 path: Q.K^T and P.V on AMX tiles (tdpbf16ps:
// bf16 pairs, fp32 accumulation in the tile); the loop, the masking, the online softmax and the
// fp32 accumulator are cpu_flash_avx512.cpp's, over blocks of 32 query rows instead of 6. K and V
// are packed as for the AVX512_BF16 path (pairs along the reduction, the layout tdpbf16ps takes
// for its B operand), with d padded to 32 so that every tile load stays inside its buffer.
// Every function carries the AMX target attribute and is reached only after cpu_isa().amx_bf16
// said yes, which includes the kernel's permission for the tile state.
//
// Eight tiles, all 16 rows x 64 bytes: 0-3 the 2 x 2 block of fp32 results (32 rows x 32
// columns), 4-5 the two 16-row halves of the A operand, 6-7 two 16-column B operands.
#include "kernels/cpu_flash_avx512.hpp"

#ifdef SDPA_X86_PATHS

#include <algorithm>

namespace sdpa_doctor::kernels::cpu_flash_detail {
namespace {

static_assert(k_amx_rows == 32, "the tile blocking below is two 16-row tiles");

// The operand of ldtilecfg (palette 1): bytes per row and rows of each of the 16 tiles.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int64_t k_tile_bytes = 64; // one tile row: 16 fp32 or 32 bf16
constexpr int64_t k_s_ld = k_amx_kv * 4; // bytes between rows of the score block

// The 2 x 2 block C (tiles 0-3) += A (4: rows 0-15, 5: rows 16-31) . B (6, 7) over `steps`
// reduction steps of 32 bf16: A at a + step * 32, rows a_ld bytes apart; B at b + step * b_step
// (elements), rows b_ld bytes apart, second column tile at b + b_col elements.
SDPA_AMX SDPA_INLINE void dot_2x2(const uint16_t* a, int64_t a_ld, const uint16_t* b,
                                  int64_t b_ld, int64_t b_step, int64_t b_col, int64_t steps) {
  const int64_t a_half = 16 * a_ld / 2; // elements between the two A tiles
  for (int64_t k = 0; k < steps; ++k) {
    _tile_loadd(4, a + 32 * k, a_ld);
    _tile_loadd(5, a + a_half + 32 * k, a_ld);
    _tile_loadd(6, b + k * b_step, b_ld);
    _tile_loadd(7, b + k * b_step + b_col, b_ld);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// The 2 x 1 block (tiles 0 and 2) for a last single column tile.
SDPA_AMX SDPA_INLINE void dot_2x1(const uint16_t* a, int64_t a_ld, const uint16_t* b,
                                  int64_t b_ld, int64_t b_step, int64_t steps) {
  const int64_t a_half = 16 * a_ld / 2;
  for (int64_t k = 0; k < steps; ++k) {
    _tile_loadd(4, a + 32 * k, a_ld);
    _tile_loadd(5, a + a_half + 32 * k, a_ld);
    _tile_loadd(6, b + k * b_step, b_ld);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(2, 5, 6);
  }
}

} // namespace

SDPA_AMX void amx_tiles_configure() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = k_tile_bytes;
    cfg.rows[t] = 16;
  }
  // Not _tile_loadconfig: GCC 12's asm names only the first 8 bytes of the operand as read, so
  // the stores of the rows and widths are dropped as dead (the tiles then fault).
  asm volatile("ldtilecfg %0" ::"m"(cfg));
}

SDPA_AMX void amx_tiles_release() { _tile_release(); }

// S = Q . K^T for the 32-row blocks of a work item, 32 keys (two column tiles) at a time and
// the blocks inside, so that those keys stay in L1 while every block uses them; d2 pairs in steps
// of 16 (d2 a multiple of 16). In packed tile u (at kb + u k_tile), K pair row e2 of key n is at
// [(e2 * 128 + n) * 2]. Block b's Q rows from q + 32 b ldq, its S rows from s + 32 b k_amx_kv.
SDPA_AMX void qk_amx(const uint16_t* q, int64_t ldq, const uint16_t* kb, int64_t k_tile,
                     int64_t d2, int64_t blocks, const int64_t* keys32, float* s) {
  const int64_t steps = d2 / 16;
  for (int64_t n0 = 0; n0 < k_amx_kv; n0 += 32) {
    const uint16_t* k = kb + (n0 / k_x_tile_kv) * k_tile + (n0 % k_x_tile_kv) * 2;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (n0 >= keys32[blk]) continue;
      float* sb = s + blk * k_amx_rows * k_amx_kv;
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      dot_2x2(q + blk * k_amx_rows * ldq, ldq * 2, k, k_x_tile_kv * 4, 16 * k_x_tile_kv * 2, 32,
              steps);
      _tile_stored(0, sb + n0, k_s_ld);
      _tile_stored(1, sb + n0 + 16, k_s_ld);
      _tile_stored(2, sb + 16 * k_amx_kv + n0, k_s_ld);
      _tile_stored(3, sb + 16 * k_amx_kv + n0 + 16, k_s_ld);
    }
  }
}

// For each block with keys: its O rows scaled by their alpha in place; then O += P.V on tiles,
// loaded from and stored back to O, 32 columns at a time and the blocks inside (those columns of
// V stay in L1). P in bf16 (32 rows of k_amx_kv per block, the first keys32 columns read). In
// packed tile u (at vb + u v_tile), V pair row j2 of column c is at [(j2 * dp + c) * 2]; block
// b's rows of pb, O and alpha start at row 32 b.
SDPA_AMX void pv_amx(const uint16_t* pb, const uint16_t* vb, int64_t v_tile, int64_t dp,
                     int64_t blocks, const int64_t* keys32, float* o, int64_t ldo,
                     const float* alpha) {
  for (int64_t r = 0; r < blocks * k_amx_rows; ++r) {
    if (keys32[r / k_amx_rows] == 0 || alpha[r] == 1.0f) continue;
    const __m512 a = _mm512_set1_ps(alpha[r]);
    float* row = o + r * ldo;
    for (int64_t c = 0; c < dp; c += 16)
      _mm512_storeu_ps(row + c, _mm512_mul_ps(_mm512_loadu_ps(row + c), a));
  }
  const int64_t o_ld = ldo * 4, v_ld = dp * 4, v_step = 16 * dp * 2;
  constexpr int64_t k_steps_per_tile = k_x_tile_kv / 32;
  for (int64_t c0 = 0; c0 < dp; c0 += 32)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      if (keys32[blk] == 0) continue;
      const uint16_t* a = pb + blk * k_amx_rows * k_amx_kv;
      float* o_high = o + blk * k_amx_rows * ldo; // rows 0-15 of the block
      float* o_low = o_high + 16 * ldo;           // rows 16-31
      const bool two = c0 + 32 <= dp;             // else one column tile (dp: a multiple of 16)
      _tile_loadd(0, o_high + c0, o_ld);
      _tile_loadd(2, o_low + c0, o_ld);
      if (two) {
        _tile_loadd(1, o_high + c0 + 16, o_ld);
        _tile_loadd(3, o_low + c0 + 16, o_ld);
      }
      for (int64_t j0 = 0; j0 < keys32[blk]; j0 += k_x_tile_kv) {
        const int64_t steps = std::min(k_steps_per_tile, (keys32[blk] - j0) / 32);
        const uint16_t* v = vb + (j0 / k_x_tile_kv) * v_tile + c0 * 2;
        if (two) dot_2x2(a + j0, k_amx_kv * 2, v, v_ld, v_step, 32, steps);
        else dot_2x1(a + j0, k_amx_kv * 2, v, v_ld, v_step, steps);
      }
      _tile_stored(0, o_high + c0, o_ld);
      _tile_stored(2, o_low + c0, o_ld);
      if (two) {
        _tile_stored(1, o_high + c0 + 16, o_ld);
        _tile_stored(3, o_low + c0 + 16, o_ld);
      }
    }
}

} // namespace sdpa_doctor::kernels::cpu_flash_detail

#endif // SDPA_X86_PATHS
