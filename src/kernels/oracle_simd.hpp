// kernels/oracle_simd: the float64 oracle's vector pieces, shared by its forward (oracle.cpp)
// and its backward (oracle_backward_blocked.cpp): one register of doubles of the clone's ISA, the
// register-blocked micro-kernel, the vector exp and max over a row (which level this CPU runs is
// cpu_isa.hpp's). Internal to kernels; every function is inline and always_inline, so each caller's
// target attribute decides the instructions (no ISA flag on any file). Files that include it
// need -O3 -ffp-contract=fast -fno-trapping-math (kernels/CMakeLists.txt).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace sdpa_doctor::kernels::oracle_simd {

constexpr int64_t k_cols = 16; // micro-kernel columns, key and V panel width

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// One vector register of doubles (and of int64 for the exp's exponent bits) of the clone's ISA:
// 64 bytes for AVX-512, 32 for AVX2, 16 for SSE2; wider ones lower into spills. No function
// takes or returns one by value (no ABI question). They move in and out of memory through
// load() and at(): a plain unaligned access, which GCC keeps in registers where a 32-byte
// memcpy under generic tuning became two 16-byte copies through the stack.
template <int Bytes> struct Simd {
  typedef double D __attribute__((vector_size(Bytes), aligned(8), may_alias));
  typedef int64_t I __attribute__((vector_size(Bytes), aligned(8)));
  static constexpr int64_t lanes = Bytes / 8;
  static constexpr int64_t per_panel = k_cols / lanes; // vectors across the 16 columns
  static inline __attribute__((always_inline)) const D& load(const double* p) {
    return *reinterpret_cast<const D*>(p);
  }
  static inline __attribute__((always_inline)) D& at(double* p) {
    return *reinterpret_cast<D*>(p);
  }
};

// C[Rows x 16] (+)= A[Rows x depth] . B[depth x 16]; row-major, leading dimensions in elements.
// Each C element is one sequential sum over depth, as in the plain dot product.
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) void micro_gemm(const double* __restrict a, int64_t lda,
                                                      const double* __restrict b, int64_t ldb,
                                                      int64_t depth, double* __restrict c,
                                                      int64_t ldc, bool accumulate) {
  using Vec = typename S::D;
  constexpr int64_t k_vecs = S::per_panel;
  constexpr int64_t w = S::lanes;
  // Every loop but the one over depth must unroll for acc to live in registers; GCC does not
  // always do it by itself at four vectors and more.
  Vec acc[Rows][k_vecs];
#pragma GCC unroll 16
  for (int64_t r = 0; r < Rows; ++r)
#pragma GCC unroll 16
    for (int64_t x = 0; x < k_vecs; ++x)
      if (accumulate)
        acc[r][x] = S::load(c + r * ldc + w * x);
      else
        acc[r][x] = Vec{};
  for (int64_t e = 0; e < depth; ++e) {
    Vec brow[k_vecs];
#pragma GCC unroll 16
    for (int64_t x = 0; x < k_vecs; ++x) brow[x] = S::load(b + e * ldb + w * x);
#pragma GCC unroll 16
    for (int64_t r = 0; r < Rows; ++r) {
      const double av = a[r * lda + e];
#pragma GCC unroll 16
      for (int64_t x = 0; x < k_vecs; ++x) acc[r][x] += av * brow[x];
    }
  }
#pragma GCC unroll 16
  for (int64_t r = 0; r < Rows; ++r)
#pragma GCC unroll 16
    for (int64_t x = 0; x < k_vecs; ++x) S::at(c + r * ldc + w * x) = acc[r][x];
}

// The same for any number of rows: blocks of Rows, then the rest in halving blocks.
template <typename S, int64_t Rows>
inline __attribute__((always_inline)) void panel_gemm(const double* a, int64_t lda,
                                                      const double* b, int64_t ldb, int64_t rows,
                                                      int64_t depth, double* c, int64_t ldc,
                                                      bool accumulate) {
  int64_t r = 0;
  for (; r + Rows <= rows; r += Rows)
    micro_gemm<S, Rows>(a + r * lda, lda, b, ldb, depth, c + r * ldc, ldc, accumulate);
  if constexpr (Rows > 1)
    if (r < rows)
      panel_gemm<S, Rows / 2>(a + r * lda, lda, b, ldb, rows - r, depth, c + r * ldc, ldc,
                              accumulate);
}

// s[j] = exp(s[j] - max) for n (a multiple of 16) scores, max finite; returns their sum.
// exp(x) = 2^k exp(r), k = round(x / ln 2), r = x - k ln 2 in [-0.35, 0.35] (Cody-Waite, ln 2 in
// two parts), exp(r) by its Taylor series to r^13 (the first term left out is < 5e-18): within
// about 2 ulp of the libm exp the plain oracle calls. Below -708 (where libm turns subnormal,
// so the score weighs < 1e-307 against the row's largest, which is 1) and for -inf: 0.
template <typename S>
inline __attribute__((always_inline)) double exp_row(double* s, int64_t n, double max) {
  using Vec = typename S::D;
  using VecI = typename S::I;
  const double shifter = 0x1.8p52; // adding it rounds to an integer (|x| < 2^51)
  Vec sum{};
  for (int64_t j = 0; j < n; j += S::lanes) {
    const Vec x = S::load(s + j) - max;
    const Vec xc = x < -708.0 ? Vec{} - 708.0 : x;
    const Vec t = xc * 1.4426950408889634 + shifter;
    const Vec k = t - shifter;
    Vec r = xc - k * 6.93147180369123816490e-01;
    r = r - k * 1.90821492927058770002e-10;
    Vec p = r * (1.0 / 6227020800.0) + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    const VecI ki = __builtin_bit_cast(VecI, t) - __builtin_bit_cast(int64_t, shifter);
    const Vec two_k = __builtin_bit_cast(Vec, (ki + 1023) << 52);
    const Vec y = x < -708.0 ? Vec{} : p * two_k;
    S::at(s + j) = y;
    sum += y;
  }
  double total = 0;
  for (int64_t l = 0; l < S::lanes; ++l) total += sum[l];
  return total;
}

// Max of n (a multiple of 16) values, -inf when all are.
template <typename S>
inline __attribute__((always_inline)) double max_row(const double* s, int64_t n) {
  using Vec = typename S::D;
  Vec m = Vec{} - std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < n; j += S::lanes) {
    const Vec x = S::load(s + j);
    m = x > m ? x : m;
  }
  double out = m[0];
  for (int64_t l = 1; l < S::lanes; ++l) out = std::max(out, m[l]);
  return out;
}

// Whether the x86-64-v4 (AVX-512) and x86-64-v3 (AVX2, FMA) clones are built; which of them
// this CPU runs is cpu_isa()'s answer.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__)
#define SDPA_ORACLE_X86_LEVELS 1
#endif

} // namespace sdpa_doctor::kernels::oracle_simd
