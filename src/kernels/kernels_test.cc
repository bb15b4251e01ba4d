// Decode tables against independently written expectations, matmul against a
// float64 product, and the bit-identity that contract 2 rests on: every ISA,
// batch size, thread count and row slice gives the same bits as the scalar
// reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "util/thread_pool.h"

namespace deltafin::kernels {
namespace {

uint32_t float_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

uint16_t bf16_of(float f) { return static_cast<uint16_t>(float_bits(f) >> 16); }

// A weight matrix in one encoding, owning its bytes.
struct TestMatrix {
  std::vector<uint8_t> data, scales;
  WeightView view;
};

// Random contents, realistic magnitudes, no NaN encodings.
TestMatrix random_matrix(Encoding enc, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  TestMatrix m;
  m.data.resize(static_cast<size_t>(traits(enc).row_bytes(cols) * rows));
  switch (enc) {
    case Encoding::F32:
      for (int64_t i = 0; i < rows * cols; ++i) {
        float f = uni(rng);
        std::memcpy(&m.data[i * 4], &f, 4);
      }
      break;
    case Encoding::BF16:
      for (int64_t i = 0; i < rows * cols; ++i) {
        uint16_t h = bf16_of(uni(rng));
        std::memcpy(&m.data[i * 2], &h, 2);
      }
      break;
    case Encoding::FP8_B128: {
      for (auto& b : m.data) {
        do b = static_cast<uint8_t>(rng()); while ((b & 0x7f) == 0x7f);
      }
      const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
      m.scales.resize(static_cast<size_t>(sr * sc * 4));
      for (int64_t i = 0; i < sr * sc; ++i) {
        float s = 1e-3f * (1.0f + 9.0f * std::abs(uni(rng)));
        std::memcpy(&m.scales[i * 4], &s, 4);
      }
      m.view.scale_stride = sc;
      break;
    }
    case Encoding::INT4_G32: {
      for (auto& b : m.data) b = static_cast<uint8_t>(rng());
      m.scales.resize(static_cast<size_t>(rows * cols / 32 * 2));
      for (int64_t i = 0; i < rows * cols / 32; ++i) {
        uint16_t h = bf16_of(0.01f * uni(rng));
        std::memcpy(&m.scales[i * 2], &h, 2);
      }
      break;
    }
    case Encoding::MXFP4_G32: {
      for (auto& b : m.data) b = static_cast<uint8_t>(rng());
      m.scales.resize(static_cast<size_t>(rows * cols / 32));
      for (auto& s : m.scales) s = static_cast<uint8_t>(118 + rng() % 12);
      break;
    }
  }
  m.view.enc = enc;
  m.view.rows = rows;
  m.view.cols = cols;
  m.view.data = m.data.data();
  m.view.scales = m.scales.empty() ? nullptr : m.scales.data();
  return m;
}

// --- Independent decodes (float64), written from the spec, not from the
// kernel code: used only as the oracle.

double e4m3_ref(uint8_t q) {
  const int s = q >> 7, e = (q >> 3) & 15, m = q & 7;
  const double mag = e == 0 ? (m / 8.0) * std::pow(2.0, -6) : (1.0 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

double e2m1_ref(int nib) {
  // sign | 2-bit exponent (bias 1) | 1-bit mantissa
  const int s = nib >> 3, e = (nib >> 1) & 3, m = nib & 1;
  const double mag = e == 0 ? m * 0.5 : (1.0 + m / 2.0) * std::pow(2.0, e - 1);
  return s ? -mag : mag;
}

double weight_ref(const TestMatrix& tm, int64_t r, int64_t c) {
  const WeightView& w = tm.view;
  const int64_t rb = traits(w.enc).row_bytes(w.cols);
  const uint8_t* row = w.data + r * rb;
  switch (w.enc) {
    case Encoding::F32: {
      float f;
      std::memcpy(&f, row + c * 4, 4);
      return f;
    }
    case Encoding::BF16: {
      uint16_t h;
      std::memcpy(&h, row + c * 2, 2);
      uint32_t b = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case Encoding::FP8_B128: {
      float s;
      std::memcpy(&s, w.scales + (((w.scale_row0 + r) / 128) * w.scale_stride + c / 128) * 4, 4);
      // The product of a 4-bit and a 24-bit significand is exact in double;
      // rounding it to float is the kernel's single rounding.
      return static_cast<float>(e4m3_ref(row[c]) * s);
    }
    case Encoding::INT4_G32: {
      uint32_t word;
      std::memcpy(&word, row + (c / 8) * 4, 4);
      const int q = static_cast<int>((word >> (4 * (c % 8))) & 15) - 8;
      uint16_t h;
      std::memcpy(&h, w.scales + (r * (w.cols / 32) + c / 32) * 2, 2);
      uint32_t b = static_cast<uint32_t>(h) << 16;
      float s;
      std::memcpy(&s, &b, 4);
      return q * static_cast<double>(s);
    }
    case Encoding::MXFP4_G32: {
      const int nib = c % 2 ? row[c / 2] >> 4 : row[c / 2] & 15;
      const int s = w.scales[r * (w.cols / 32) + c / 32];
      return std::ldexp(e2m1_ref(nib), s - 127);
    }
  }
  return 0;
}

std::vector<float> decode(const WeightView& w, int64_t r) {
  std::vector<float> out(static_cast<size_t>(w.cols));
  traits(w.enc).decode_row(w, r, out.data());
  return out;
}

std::vector<float> random_x(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(rng);
  return x;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (int i = 0; i < kNumIsas; ++i)
    if (isa_supported(static_cast<Isa>(i))) v.push_back(static_cast<Isa>(i));
  return v;
}

// Restores the cpuid choice after a test forces one.
struct IsaGuard {
  Isa saved = active_isa();
  ~IsaGuard() { force_isa(saved); }
};

// ---------------------------------------------------------------- decodes

TEST(Decode, Table) {
  EXPECT_EQ(encoding_name(Encoding::BF16), "bf16");
  EXPECT_EQ(traits(Encoding::INT4_G32).group, 32);
  EXPECT_EQ(traits(Encoding::MXFP4_G32).group, 32);
  EXPECT_EQ(traits(Encoding::F32).row_bytes(10), 40);
  EXPECT_EQ(traits(Encoding::BF16).row_bytes(10), 20);
  EXPECT_EQ(traits(Encoding::FP8_B128).row_bytes(10), 10);
  EXPECT_EQ(traits(Encoding::INT4_G32).row_bytes(64), 32);
  EXPECT_EQ(traits(Encoding::MXFP4_G32).row_bytes(64), 32);
}

TEST(Decode, E4m3EdgeCases) {
  // One row holding every byte, scale 1 (two 128-column blocks).
  std::vector<uint8_t> bytes(256);
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  std::vector<float> scales = {1.0f, 1.0f};
  WeightView w{Encoding::FP8_B128, 1, 256, bytes.data(),
               reinterpret_cast<const uint8_t*>(scales.data()), 2, 0};
  auto d = decode(w, 0);
  EXPECT_EQ(float_bits(d[0x00]), 0u);
  EXPECT_EQ(float_bits(d[0x80]), 0x80000000u);  // -0
  EXPECT_EQ(d[0x01], std::ldexp(1.0f, -9));     // smallest subnormal
  EXPECT_EQ(d[0x07], 7 * std::ldexp(1.0f, -9)); // largest subnormal
  EXPECT_EQ(d[0x08], std::ldexp(1.0f, -6));     // smallest normal
  EXPECT_EQ(d[0x38], 1.0f);
  EXPECT_EQ(d[0x3f], 1.875f);
  EXPECT_EQ(d[0x40], 2.0f);
  EXPECT_EQ(d[0x7e], 448.0f);
  EXPECT_EQ(d[0xfe], -448.0f);
  EXPECT_EQ(d[0x81], -std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(d[0x7f]));
  EXPECT_TRUE(std::isnan(d[0xff]));
  for (int i = 0; i < 256; ++i) {
    if ((i & 0x7f) == 0x7f) continue;
    EXPECT_EQ(static_cast<double>(d[i]), e4m3_ref(static_cast<uint8_t>(i))) << i;
  }
}

TEST(Decode, E4m3TimesScaleRoundsOnce) {
  std::vector<uint8_t> bytes(300);
  for (int i = 0; i < 300; ++i) bytes[i] = static_cast<uint8_t>((i * 37) % 256 == 0x7f ? 1 : (i * 37) % 256);
  // Three column blocks (the last one partial), awkward scales including a
  // subnormal one.
  std::vector<float> scales = {0.3f, 1.0e-39f, 7.123456e-3f};
  WeightView w{Encoding::FP8_B128, 1, 300, bytes.data(),
               reinterpret_cast<const uint8_t*>(scales.data()), 3, 0};
  auto d = decode(w, 0);
  for (int c = 0; c < 300; ++c) {
    if ((bytes[c] & 0x7f) == 0x7f) continue;
    EXPECT_EQ(d[c], static_cast<float>(e4m3_ref(bytes[c]) * scales[c / 128])) << c;
  }
}

TEST(Decode, Mxfp4EveryNibbleAndScale) {
  // 32 elements: byte b holds nibbles 2b (low) and 2b+1 (high); elements
  // 0..15 are nibbles 0..15, then 16..31 the same again.
  std::vector<uint8_t> packed(16);
  for (int b = 0; b < 16; ++b) packed[b] = static_cast<uint8_t>(((2 * b + 1) % 16) << 4 | (2 * b) % 16);
  const float kExpect[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int s = 0; s < 255; ++s) {
    uint8_t scale = static_cast<uint8_t>(s);
    WeightView w{Encoding::MXFP4_G32, 1, 32, packed.data(), &scale, 0, 0};
    auto d = decode(w, 0);
    for (int c = 0; c < 32; ++c) {
      const float want = static_cast<float>(std::ldexp(static_cast<double>(kExpect[c % 16]), s - 127));
      EXPECT_EQ(float_bits(d[c]), float_bits(want)) << "s=" << s << " c=" << c;
    }
  }
  // s = 0 is the subnormal 2^-127 exactly.
  uint8_t zero = 0;
  WeightView w{Encoding::MXFP4_G32, 1, 32, packed.data(), &zero, 0, 0};
  EXPECT_EQ(float_bits(decode(w, 0)[2]), 0x00400000u);
}

TEST(Decode, Int4NibbleOrderWithinInt32) {
  // Two int32 words: element j of a word sits at bits 4j..4j+3, stored q+8.
  const uint32_t words[8] = {0x76543210u, 0xFEDCBA98u, 0x00000008u, 0x8888888Fu,
                             0x12345678u, 0x9ABCDEF0u, 0x0u, 0xFFFFFFFFu};
  std::vector<uint8_t> packed(32);
  std::memcpy(packed.data(), words, 32);
  const uint16_t scales[2] = {0x3fc0, 0xbe80};  // bf16 1.5, -0.25 (groups of 32)
  WeightView w{Encoding::INT4_G32, 1, 64, packed.data(),
               reinterpret_cast<const uint8_t*>(scales), 0, 0};
  auto d = decode(w, 0);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(d[j], (j - 8) * 1.5f) << j;
  for (int j = 0; j < 8; ++j) EXPECT_EQ(d[8 + j], j * 1.5f) << j;
  EXPECT_EQ(d[16], 0.0f);
  EXPECT_EQ(d[17], -12.0f);
  EXPECT_EQ(d[24], 10.5f);  // 0xF - 8 = 7 in the lowest nibble of word 3
  EXPECT_EQ(d[25], 0.0f);
  EXPECT_EQ(d[32], 0.0f);    // word 4 = 0x12345678, second scale group
  EXPECT_EQ(d[33], 0.25f);   // 7 - 8 = -1 times -0.25
  EXPECT_EQ(d[39], 1.75f);   // 1 - 8 = -7
  EXPECT_EQ(d[40], 2.0f);    // word 5 = 0x9ABCDEF0: 0 - 8
  EXPECT_EQ(d[47], -0.25f);  // 9 - 8
  EXPECT_EQ(d[48], 2.0f);    // word 6: all zeros
  EXPECT_EQ(d[63], -1.75f);  // word 7: 15 - 8
}

TEST(Decode, Bf16IsTheUpperHalfOfAnFp32) {
  const uint16_t h[3] = {0x3f80, 0xc2f7, 0x0001};
  WeightView w{Encoding::BF16, 1, 3, reinterpret_cast<const uint8_t*>(h), nullptr, 0, 0};
  auto d = decode(w, 0);
  EXPECT_EQ(d[0], 1.0f);
  EXPECT_EQ(d[1], -123.5f);
  EXPECT_EQ(float_bits(d[2]), 0x00010000u);
}

TEST(Decode, MatchesIndependentDecodeOnRandomMatrices) {
  for (int e = 0; e < kNumEncodings; ++e) {
    const Encoding enc = static_cast<Encoding>(e);
    TestMatrix m = random_matrix(enc, 5, 320, 7 + e);
    for (int64_t r = 0; r < 5; ++r) {
      auto d = decode(m.view, r);
      for (int64_t c = 0; c < 320; ++c)
        ASSERT_EQ(static_cast<double>(d[c]), weight_ref(m, r, c))
            << encoding_name(enc) << " r=" << r << " c=" << c;
    }
  }
}

// ---------------------------------------------------------------- products

struct Shape {
  Encoding enc;
  int64_t rows, cols;
};

// Odd shapes: partial 16-lane tails for F32/BF16/FP8, partial 128-blocks and
// several scale row blocks for FP8, groups of 32 for INT4/MXFP4, and rows
// wider than a column span.
const Shape kShapes[] = {
    {Encoding::F32, 37, 203},      {Encoding::F32, 5, 7},
    {Encoding::BF16, 41, 333},     {Encoding::BF16, 3, 16},
    {Encoding::FP8_B128, 300, 301}, {Encoding::FP8_B128, 9, 129},
    {Encoding::INT4_G32, 43, 224}, {Encoding::INT4_G32, 6, 32},
    {Encoding::MXFP4_G32, 39, 416}, {Encoding::MXFP4_G32, 7, 64},
    // Wider than one column span of the many-row path (kernels_tile.h).
    {Encoding::BF16, 5, 2100},     {Encoding::FP8_B128, 6, 1300},
    {Encoding::MXFP4_G32, 5, 2112},
    // More scale groups than the kernels stage on the stack.
    {Encoding::INT4_G32, 9, 8224},
};

TEST(Matmul, CloseToFloat64ProductForEveryEncoding) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    for (const Shape& s : kShapes) {
      TestMatrix m = random_matrix(s.enc, s.rows, s.cols, 11);
      const int64_t n = 3, xs = s.cols + 5, ys = s.rows + 2;
      auto x = random_x(n * xs, 12);
      std::vector<float> y(static_cast<size_t>(n * ys), -1.0f);
      matmul(m.view, x.data(), n, xs, y.data(), ys);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < s.rows; ++o) {
          double ref = 0, mag = 0;
          for (int64_t c = 0; c < s.cols; ++c) {
            const double p = weight_ref(m, o, c) * x[r * xs + c];
            ref += p;
            mag += std::abs(p);
          }
          ASSERT_NEAR(y[r * ys + o], ref, 1e-6 * mag + 1e-30)
              << isa_name(isa) << " " << encoding_name(s.enc) << " r=" << r << " o=" << o;
        }
      // Padding between rows of y is left alone.
      EXPECT_EQ(y[s.rows], -1.0f);
    }
  }
}

TEST(Matmul, DotIsTheCanonicalOrder) {
  // Lane i % 16 accumulates with fma; lanes are summed by the fixed tree.
  auto a = random_x(53, 1), b = random_x(53, 2);
  float acc[16] = {};
  for (int i = 0; i < 53; ++i) acc[i % 16] = std::fma(a[i], b[i], acc[i % 16]);
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  const float want = (s4[0] + s4[2]) + (s4[1] + s4[3]);
  IsaGuard isa_guard;
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    EXPECT_EQ(float_bits(dot(a.data(), b.data(), 53)), float_bits(want)) << isa_name(isa);
    for (int64_t n : {0, 1, 15, 16, 17, 31, 48}) {
      const float got = dot(a.data(), b.data(), n);
      force_isa(Isa::Scalar);
      const float ref = dot(a.data(), b.data(), n);
      force_isa(isa);
      EXPECT_EQ(float_bits(got), float_bits(ref)) << isa_name(isa) << " n=" << n;
    }
  }
  // And a one-row matmul over an F32 weight row is the same dot.
  WeightView w{Encoding::F32, 1, 53, reinterpret_cast<const uint8_t*>(a.data()), nullptr, 0, 0};
  float y = 0;
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    matmul(w, b.data(), 1, 53, &y, 1);
    EXPECT_EQ(float_bits(y), float_bits(want)) << isa_name(isa);
  }
}

TEST(Matmul, AxpyIsTheElementwiseFmaOnEveryIsa) {
  auto x = random_x(77, 3), y0 = random_x(77, 4);
  const float a = -0.7123f;
  IsaGuard isa_guard;
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 77}) {
      std::vector<float> want = y0, got = y0;
      for (int64_t i = 0; i < n; ++i) want[i] = std::fma(a, x[i], want[i]);
      axpy(a, x.data(), got.data(), n);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << isa_name(isa) << " n=" << n;
    }
  }
}

// Y for a product computed one way, to compare bit for bit with another way.
std::vector<float> product(const WeightView& w, const std::vector<float>& x, int64_t n,
                           ThreadPool* pool = nullptr) {
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  matmul(w, x.data(), n, w.cols, y.data(), w.rows, pool);
  return y;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(BitIdentity, EveryIsaEqualsScalar) {
  IsaGuard guard;
  for (const Shape& s : kShapes) {
    TestMatrix m = random_matrix(s.enc, s.rows, s.cols, 21);
    for (int64_t n : {1, 2, 3, 4, 5, 9}) {
      auto x = random_x(n * s.cols, 22 + static_cast<uint32_t>(n));
      force_isa(Isa::Scalar);
      auto ref = product(m.view, x, n);
      for (Isa isa : supported_isas()) {
        force_isa(isa);
        EXPECT_TRUE(same_bits(product(m.view, x, n), ref))
            << isa_name(isa) << " " << encoding_name(s.enc) << " n=" << n;
      }
    }
  }
}

TEST(BitIdentity, BatchRowEqualsTheRowAlone) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    for (const Shape& s : kShapes) {
      TestMatrix m = random_matrix(s.enc, s.rows, s.cols, 31);
      auto x37 = random_x(37 * s.cols, 32);
      auto y37 = product(m.view, x37, 37);
      std::vector<float> x5(x37.begin() + 10 * s.cols, x37.begin() + 15 * s.cols);
      auto y5 = product(m.view, x5, 5);
      for (int64_t r = 0; r < 37; ++r) {
        std::vector<float> x1(x37.begin() + r * s.cols, x37.begin() + (r + 1) * s.cols);
        auto y1 = product(m.view, x1, 1);
        ASSERT_EQ(std::memcmp(y1.data(), &y37[r * s.rows], s.rows * 4), 0)
            << isa_name(isa) << " " << encoding_name(s.enc) << " row " << r;
        if (r >= 10 && r < 15) {
          ASSERT_EQ(std::memcmp(y1.data(), &y5[(r - 10) * s.rows], s.rows * 4), 0)
              << isa_name(isa) << " " << encoding_name(s.enc) << " row " << r;
        }
      }
    }
  }
}

TEST(BitIdentity, ThreadCountDoesNotChangeResults) {
  IsaGuard guard;
  ThreadPool p1(1), p2(2), p3(3);
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    for (const Shape& s : kShapes) {
      TestMatrix m = random_matrix(s.enc, s.rows, s.cols, 41);
      for (int64_t n : {1, 6}) {
        auto x = random_x(n * s.cols, 42);
        auto y0 = product(m.view, x, n);
        EXPECT_TRUE(same_bits(product(m.view, x, n, &p1), y0));
        EXPECT_TRUE(same_bits(product(m.view, x, n, &p2), y0)) << encoding_name(s.enc);
        EXPECT_TRUE(same_bits(product(m.view, x, n, &p3), y0)) << encoding_name(s.enc);
      }
    }
  }
}

TEST(BitIdentity, RowSliceEqualsTheFullMatrix) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    for (const Shape& s : kShapes) {
      TestMatrix m = random_matrix(s.enc, s.rows, s.cols, 51);
      auto x = random_x(2 * s.cols, 52);
      auto full = product(m.view, x, 2);
      // Slices starting anywhere, FP8 ones inside a 128-row scale block.
      for (int64_t r0 : {int64_t{0}, int64_t{1}, s.rows / 2, s.rows - 1}) {
        for (int64_t len : {int64_t{1}, s.rows - r0}) {
          if (r0 + len > s.rows) continue;
          WeightView v = m.view.row_slice(r0, len);
          auto part = product(v, x, 2);
          for (int64_t r = 0; r < 2; ++r)
            ASSERT_EQ(std::memcmp(&part[r * len], &full[r * s.rows + r0], len * 4), 0)
                << isa_name(isa) << " " << encoding_name(s.enc) << " r0=" << r0;
        }
      }
    }
  }
  // A slice of an FP8 matrix starting at row 200 (inside scale block 1) and
  // crossing into block 2 picks each row's own scale row.
  TestMatrix m = random_matrix(Encoding::FP8_B128, 300, 256, 53);
  WeightView v = m.view.row_slice(200, 80);
  EXPECT_EQ(v.scale_row0, 200);
  for (int64_t r : {0, 55, 56, 79}) {
    auto a = decode(v, r), b = decode(m.view, 200 + r);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 256 * 4), 0) << r;
  }
}

TEST(Matmul, NanWeightsGiveNanOutputs) {
  IsaGuard guard;
  TestMatrix m = random_matrix(Encoding::FP8_B128, 8, 160, 61);
  m.data[3 * 160 + 17] = 0x7f;
  m.data[5 * 160 + 150] = 0xff;
  auto x = random_x(160, 62);
  for (Isa isa : supported_isas()) {
    force_isa(isa);
    auto y = product(m.view, x, 1);
    for (int o = 0; o < 8; ++o) {
      EXPECT_EQ(std::isnan(y[o]), o == 3 || o == 5) << isa_name(isa) << " o=" << o;
    }
  }
}

TEST(BitIdentity, ExtremeScales) {
  IsaGuard guard;
  // FP8 scales: huge (2^120: scale * 2^8 would overflow), tiny (subnormal
  // products), negative, and ordinary, one per 128 x 128 block.
  TestMatrix f = random_matrix(Encoding::FP8_B128, 200, 300, 71);
  const float fs[6] = {0x1p120f, 1e-38f, -0.75f, 3e-3f, 0x1p-140f, 1.0f};
  std::memcpy(f.scales.data(), fs, sizeof(fs));
  // MXFP4 scales 0 (2^-127, subnormal), 1, 254 (2^127), 127.
  TestMatrix m = random_matrix(Encoding::MXFP4_G32, 9, 128, 72);
  const uint8_t ms[4] = {0, 1, 254, 127};
  for (size_t i = 0; i < m.scales.size(); ++i) m.scales[i] = ms[i % 4];
  // INT4 bf16 scales: subnormal, huge, negative.
  TestMatrix q = random_matrix(Encoding::INT4_G32, 9, 128, 73);
  const uint16_t qs[4] = {0x0001, 0x7f00, 0xbf80, 0x3c00};
  for (size_t i = 0; i < q.scales.size() / 2; ++i) std::memcpy(&q.scales[2 * i], &qs[i % 4], 2);
  for (const TestMatrix* t : {&f, &m, &q}) {
    auto x = random_x(5 * t->view.cols, 74);
    for (int64_t n : {1, 5}) {
      force_isa(Isa::Scalar);
      auto ref = product(t->view, x, n);
      for (Isa isa : supported_isas()) {
        force_isa(isa);
        EXPECT_TRUE(same_bits(product(t->view, x, n), ref))
            << isa_name(isa) << " " << encoding_name(t->view.enc) << " n=" << n;
      }
    }
  }
}

TEST(Isa, ForcingAnUnsupportedIsaIsAnError) {
  for (int i = 0; i < kNumIsas; ++i) {
    const Isa isa = static_cast<Isa>(i);
    if (!isa_supported(isa)) {
      EXPECT_THROW(force_isa(isa), std::exception);
    }
  }
  EXPECT_TRUE(isa_supported(Isa::Scalar));
}

}  // namespace
}  // namespace deltafin::kernels
