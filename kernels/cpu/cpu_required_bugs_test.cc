// Tests aimed at three specific kernel bugs; each was checked to fail with the bug planted
// (see kernels/README.md): a dropped online-softmax rescale, an off-by-one causal mask, and
// a tail key tile shorter than block_s read or counted past its end.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "fusetune/kernels/cpu_backend.h"
#include "fusetune/kernels/reference.h"

namespace fusetune {
namespace {

using testing_util::Inputs;
using testing_util::MaxAbsError;
using testing_util::RunBackend;
using testing_util::RunOptions;

constexpr Variant kVariants[] = {Variant::kFused, Variant::kPartial, Variant::kMaterialized};

KernelConfig Config(Variant variant, int bm, int bs, int threads = 2) {
  KernelConfig c;
  c.variant = variant;
  c.block_m = bm;
  c.block_s = bs;
  c.threads = threads;
  return c;
}

// (a) Scores grow with the key index, so every later key tile raises the running max: the
// accumulator and l from earlier tiles must be scaled by exp(m_old - m_new). Without that
// factor the early keys keep weights up to e^10 too large and the output is far off.
TEST(FusedCpu, RescalesAccumulatorWhenMaxGrowsAcrossKeyTiles) {
  AttentionProblem p;
  p.q_heads = 2;
  p.kv_heads = 1;
  p.q_len = 5;
  p.kv_len = 160;
  p.head_dim = 32;
  p.softmax_scale = 1.0f;
  Inputs in;
  in.q.assign(p.QElements(), 0.0f);
  in.k.assign(p.KVElements(), 0.0f);
  in.v = testing_util::Uniform(p.KVElements(), -1.0f, 1.0f, 11);
  for (int t = 0; t < p.q_len; ++t) {
    for (int h = 0; h < p.q_heads; ++h) in.q[(t * p.q_heads + h) * 32] = 1.0f + 0.1f * t;
  }
  for (int j = 0; j < p.kv_len; ++j) in.k[j * 32] = 10.0f * j / p.kv_len;  // score = q0 * k0
  auto ref = ReferenceAttention(p, in.q, in.k, in.v);
  ASSERT_TRUE(ref.ok());
  for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
    for (int bs : {16, 32, 64}) {
      for (int threads : {1, 2}) {
        auto out = RunBackend(*backend, p, Config(Variant::kFused, 16, bs, threads), in);
        ASSERT_TRUE(out.ok()) << out.status();
        EXPECT_LE(MaxAbsError(*out, *ref), 1e-5) << isa << " block_s=" << bs;
      }
    }
  }
}

// (b) Bottom-right aligned causal mask with q != k, checked against outputs written down by
// hand (independently of VisibleKeysForQuery): with all scores equal and V_j = e_j, query i
// must average exactly the keys j <= i + (k - q), i.e. out[i][j] = 1 / (i + k - q + 1) for
// those j and 0 elsewhere; rows with no visible key are 0. Any off-by-one in the mask
// (j < i + offset, or j <= i + offset + 1) changes a whole column of the expected pattern.
TEST(CpuBackend, CausalMaskIsExactlyBottomRightAligned) {
  struct Shape {
    int q, k;
  };
  for (Variant variant : kVariants) {
    for (Shape shape : {Shape{3, 5}, Shape{37, 100}, Shape{100, 37}, Shape{64, 64}, Shape{17, 18}}) {
      AttentionProblem p;
      p.q_len = shape.q;
      p.kv_len = shape.k;
      p.head_dim = 128;  // >= k, so that V_j = e_j fits
      p.causal = true;
      Inputs in;
      in.q.assign(p.QElements(), 0.0f);  // every score is 0
      in.k = testing_util::Uniform(p.KVElements(), -1.0f, 1.0f, 3);
      in.v.assign(p.KVElements(), 0.0f);
      for (int j = 0; j < shape.k; ++j) in.v[j * 128 + j] = 1.0f;
      for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
      for (int bs : {16, 32}) {
        auto out = RunBackend(*backend, p, Config(variant, 16, bs), in);
        ASSERT_TRUE(out.ok()) << out.status();
        for (int i = 0; i < shape.q; ++i) {
          const int last_visible = i + (shape.k - shape.q);  // keys 0..last_visible
          for (int j = 0; j < 128; ++j) {
            double expected = 0.0;
            if (last_visible >= 0 && j <= last_visible && j < shape.k) {
              expected = 1.0 / (last_visible + 1);
            }
            ASSERT_NEAR((*out)[i * 128 + j], expected, 1e-6)
                << isa << " " << VariantName(variant) << " q=" << shape.q << " k=" << shape.k
                << " block_s=" << bs << " row " << i << " col " << j;
          }
        }
      }
      }
    }
  }
}

// (c) Key lengths that are not multiples of block_s, with NaN stored right after the last
// key row (in a larger allocation) and in the key-padding rows that exist in memory but are
// hidden. A kernel that reads a whole block_s tile, or lets the tail tile's padded columns
// into the softmax, produces NaN or a wrong normalization.
TEST(CpuBackend, TailKeyTileShorterThanBlockSIgnoresMemoryPastTheEnd) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (auto& [isa, backend] : testing_util::BackendsForEveryIsa()) {
  SCOPED_TRACE("isa=" + isa);
  for (Variant variant : kVariants) {
    for (int k : {1, 17, 67, 129}) {
      for (int bs : {16, 32, 64, 128}) {
        for (bool causal : {false, true}) {
          AttentionProblem p;
          p.q_len = 23;
          p.kv_len = k;
          p.head_dim = 32;
          p.q_heads = 2;
          p.kv_heads = 2;
          p.causal = causal;
          Inputs in = testing_util::RandomInputs(p, 13 + k);
          RunOptions poison;
          poison.extra_kv_rows = 128;
          poison.kv_tail_value = nan;
          auto out = RunBackend(*backend, p, Config(variant, 16, bs), in, poison);
          ASSERT_TRUE(out.ok()) << out.status();
          auto ref = ReferenceAttention(p, in.q, in.k, in.v);
          ASSERT_TRUE(ref.ok());
          EXPECT_LE(MaxAbsError(*out, *ref), 1e-5)
              << VariantName(variant) << " k=" << k << " block_s=" << bs << " causal=" << causal;
        }
      }
    }
    // Key padding: rows past kv_valid_lens hold NaN.
    AttentionProblem p;
    p.batch = 2;
    p.q_len = 9;
    p.kv_len = 100;
    p.head_dim = 32;
    p.kv_valid_lens = {37, 70};
    Inputs in = testing_util::RandomInputs(p, 21);
    auto ref = ReferenceAttention(p, in.q, in.k, in.v);
    ASSERT_TRUE(ref.ok());
    for (int b = 0; b < 2; ++b) {
      for (int j = p.kv_valid_lens[b]; j < p.kv_len; ++j) {
        for (int x = 0; x < 32; ++x) {
          in.k[(b * 100 + j) * 32 + x] = nan;
          in.v[(b * 100 + j) * 32 + x] = nan;
        }
      }
    }
    for (int bs : {16, 32, 64}) {
      auto out = RunBackend(*backend, p, Config(variant, 16, bs), in);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_LE(MaxAbsError(*out, *ref), 1e-5) << VariantName(variant) << " padded, block_s=" << bs;
    }
  }
  }
}

}  // namespace
}  // namespace fusetune
