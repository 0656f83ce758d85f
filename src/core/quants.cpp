#include "core/quants.h"

#include <cstring>
#include <utility>

#include "core/errors.h"
#include "partix/dtype.h"

namespace partix::detail {
namespace {

// Every type id of the GGUF format with its block geometry (elements, bytes). Ids 4, 5
// and 31-33, 36-38 were retired from the format and are rejected as unknown.
constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},
    {2, "Q4_0", 32, 18, true},       {3, "Q4_1", 32, 20, true},
    {6, "Q5_0", 32, 22, false},      {7, "Q5_1", 32, 24, false},
    {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},
    {10, "Q2_K", 256, 84, false},    {11, "Q3_K", 256, 110, false},
    {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, false},
    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},
    {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},
    {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, false},   {21, "IQ3_S", 256, 110, false},
    {22, "IQ2_S", 256, 82, false},   {23, "IQ4_XS", 256, 136, false},
    {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},
    {28, "F64", 1, 8, false},        {29, "IQ1_M", 256, 56, false},
    {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},   {39, "MXFP4", 32, 17, false},
};

float half(const uint8_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return static_cast<float>(float16::from_bits(b));
}

// Q4_0, 32 elements: f16 scale d, 16 bytes of 4-bit codes; the low nibbles are elements
// 0..15, the high nibbles 16..31; value = (code - 8) * d.
void q4_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1, 32 elements: f16 scale d, f16 offset m, 16 bytes of codes laid out as Q4_0;
// value = code * d + m.
void q4_1(const uint8_t* b, float* y) {
  const float d = half(b), m = half(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q8_0, 32 elements: f16 scale d, 32 signed bytes; value = q * d.
void q8_0(const uint8_t* b, float* y) {
  const float d = half(b);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// Q4_K's 6-bit scale and min of sub-block j (0..7) from its 12 packed bytes: sub-blocks
// 0..3 sit in the low 6 bits of bytes j and j+4; 4..7 take 4 bits from byte j+4 and
// their top 2 bits from the spare high bits of bytes j-4 (scale) and j (min).
void scale_min_k4(int j, const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q4_K, 256 elements in 8 sub-blocks of 32: f16 d, f16 dmin, 12 bytes of 6-bit scales and
// mins, 128 bytes of 4-bit codes. Each 32 code bytes hold two sub-blocks (low nibbles
// first); value = d * scale * code - dmin * min.
void q4_k(const uint8_t* b, float* y) {
  const float d = half(b), dmin = half(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int pair = 0; pair < 4; ++pair) {
    uint8_t sc, mn;
    scale_min_k4(2 * pair, scales, &sc, &mn);
    const float d1 = d * sc, m1 = dmin * mn;
    scale_min_k4(2 * pair + 1, scales, &sc, &mn);
    const float d2 = d * sc, m2 = dmin * mn;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) y[32 + l] = d2 * static_cast<float>(q[l] >> 4) - m2;
    q += 32;
    y += 64;
  }
}

// Q6_K, 256 elements in 16 sub-blocks of 16: 128 bytes of low 4 bits (ql), 64 bytes of
// high 2 bits (qh), 16 signed 8-bit scales, f16 d. Each half of 128 elements uses 64 ql
// bytes and 32 qh bytes: element l + 32*i (i = 0..3) takes nibble (i / 2) of ql[l + 32*(i%2)]
// and bits 2i..2i+1 of qh[l]; value = d * scale[sub-block] * (q - 32).
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half(b + 208);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kTypes) {
    if (t.id == id) return t;
  }
  return std::nullopt;
}

void dequantize_blocks(uint32_t id, const uint8_t* src, int64_t nblocks, float* dst) {
  switch (id) {
    case kGgmlF32:
      std::memcpy(dst, src, static_cast<size_t>(nblocks) * 4);
      return;
    case kGgmlF16:
      for (int64_t i = 0; i < nblocks; ++i) dst[i] = half(src + 2 * i);
      return;
    case kGgmlBF16:
      for (int64_t i = 0; i < nblocks; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = static_cast<float>(bfloat16::from_bits(b));
      }
      return;
    case kGgmlQ4_0:
      for (int64_t i = 0; i < nblocks; ++i) q4_0(src + 18 * i, dst + 32 * i);
      return;
    case kGgmlQ4_1:
      for (int64_t i = 0; i < nblocks; ++i) q4_1(src + 20 * i, dst + 32 * i);
      return;
    case kGgmlQ8_0:
      for (int64_t i = 0; i < nblocks; ++i) q8_0(src + 34 * i, dst + 32 * i);
      return;
    case kGgmlQ4_K:
      for (int64_t i = 0; i < nblocks; ++i) q4_k(src + 144 * i, dst + 256 * i);
      return;
    case kGgmlQ6_K:
      for (int64_t i = 0; i < nblocks; ++i) q6_k(src + 210 * i, dst + 256 * i);
      return;
    default:
      internal_error("dequantize_blocks", "unsupported ggml type");
  }
}

namespace {
constexpr std::pair<uint32_t, DType> kGgmlDtypes[] = {
    {kGgmlF32, DType::F32},   {kGgmlF16, DType::F16},   {kGgmlBF16, DType::BF16},
    {kGgmlQ8_0, DType::Q8_0}, {kGgmlQ4_0, DType::Q4_0}, {kGgmlQ4_1, DType::Q4_1},
    {kGgmlQ4_K, DType::Q4_K}, {kGgmlQ6_K, DType::Q6_K}};
}  // namespace

std::optional<DType> dtype_of_ggml(uint32_t id) {
  for (const auto& [g, d] : kGgmlDtypes) {
    if (g == id) return d;
  }
  return std::nullopt;
}

uint32_t ggml_of_dtype(DType dtype) {
  for (const auto& [g, d] : kGgmlDtypes) {
    if (d == dtype) return g;
  }
  internal_error("ggml_of_dtype", "no ggml type for this dtype");
}

void dequantize(DType dtype, const void* src, int64_t n, float* dst) {
  dequantize_blocks(ggml_of_dtype(dtype), static_cast<const uint8_t*>(src), n / dtype_block_elems(dtype),
                    dst);
}

}  // namespace partix::detail
