#include "fusetune/regress/suite.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "fusetune/kernels/default_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#ifdef FUSETUNE_HAVE_CUDA_FUSED
#include "attention_params.h"
#include "decode/decode_dispatch.h"
#endif

namespace fusetune::regress {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSeedKey[] = "prefill/b1/hq12/hkv12/q128/k128/d64/causal0/fp32";
constexpr char kFused[] = "fused/bm64/bs64/t2/fp32/st1";
constexpr char kMaterialized[] = "materialized/bm64/bs64/t2/fp32/st1";

AttentionProblem Problem(std::string_view key) {
  absl::StatusOr<AttentionProblem> p = AttentionProblem::FromKey(key);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : AttentionProblem{};
}

KernelConfig Config(std::string_view key) {
  absl::StatusOr<KernelConfig> c = KernelConfig::FromKey(key);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : KernelConfig{};
}

AttentionProblem VarlenProblem() {
  AttentionProblem p;
  p.batch = 3;
  p.q_heads = 8;
  p.kv_heads = 2;
  p.cu_seqlens_q = {0, 5, 12, 30};
  p.cu_seqlens_k = {0, 7, 7, 40};
  p.q_len = 18;
  p.kv_len = 33;
  p.head_dim = 128;
  p.causal = true;
  p.dtype = DType::kBf16;
  return p;
}

AttentionProblem PaddedProblem() {
  AttentionProblem p = Problem("prefill/b2/hq4/hkv4/q16/k64/d64/causal0/fp16");
  p.kv_valid_lens = {64, 17};
  return p;
}

SuiteCell Cell(const AttentionProblem& problem, std::string_view config, std::string role = "best") {
  SuiteCell cell;
  cell.problem = problem;
  cell.config = Config(config);
  cell.role = std::move(role);
  return cell;
}

void ExpectSameSuite(const Suite& a, const Suite& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.description, b.description);
  EXPECT_EQ(a.device_class, b.device_class);
  EXPECT_EQ(a.block.warmup, b.block.warmup);
  EXPECT_EQ(a.block.repeats, b.block.repeats);
  EXPECT_EQ(a.block.max_seconds, b.block.max_seconds);
  EXPECT_EQ(a.block.flush_l2, b.block.flush_l2);
  EXPECT_EQ(a.block.graph, b.block.graph);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.rounds_across_problems, b.rounds_across_problems);
  ASSERT_EQ(a.cells.size(), b.cells.size());
  for (size_t i = 0; i < a.cells.size(); ++i) {
    // ProblemToJson holds every field, so equal texts are equal problems.
    EXPECT_EQ(ProblemToJson(a.cells[i].problem), ProblemToJson(b.cells[i].problem)) << i;
    EXPECT_EQ(a.cells[i].config, b.cells[i].config) << i;
    EXPECT_EQ(a.cells[i].role, b.cells[i].role) << i;
    EXPECT_EQ(a.cells[i].baseline_config, b.cells[i].baseline_config) << i;
  }
}

Suite RoundTrip(const Suite& suite) {
  absl::StatusOr<Suite> back = ParseSuite(SuiteToJson(suite));
  EXPECT_TRUE(back.ok()) << back.status() << "\n" << SuiteToJson(suite);
  return back.ok() ? *back : Suite{};
}

// A suite document with one cell (`cell`, a JSON object) and `extra` top-level fields.
std::string OneCellSuite(const std::string& cell, const std::string& extra = "") {
  return R"({"name": "t", )" + extra + R"("cells": [)" + cell + "]}";
}

std::string SeedCell(const std::string& extra = "") {
  return std::string(R"({"problem": ")") + kSeedKey + R"(", "config": ")" + kFused + "\"" + extra + "}";
}

void ExpectInvalid(const std::string& json, const std::string& message_part) {
  absl::StatusOr<Suite> suite = ParseSuite(json);
  ASSERT_FALSE(suite.ok()) << json;
  EXPECT_EQ(suite.status().code(), absl::StatusCode::kInvalidArgument) << suite.status();
  EXPECT_THAT(std::string(suite.status().message()), HasSubstr(message_part)) << json;
}

TEST(Suite, UniformSuiteRoundTripsWithProblemsAsKeys) {
  Suite suite;
  suite.name = "cpu-small";
  suite.description = "two cells";
  suite.block = {.warmup = 1, .repeats = 5, .max_seconds = 0.2, .flush_l2 = false};
  suite.blocks = 12;
  suite.cells = {Cell(Problem(kSeedKey), kFused), Cell(Problem(kSeedKey), kMaterialized, "materialized")};
  const std::string text = SuiteToJson(suite);
  EXPECT_THAT(text, HasSubstr(std::string("\"problem\":\"") + kSeedKey + "\""));
  EXPECT_THAT(text, Not(HasSubstr("device_class")));
  ExpectSameSuite(RoundTrip(suite), suite);
}

TEST(Suite, GraphTimedBlocksRoundTripAndAreOffUnlessSaid) {
  Suite suite;
  suite.name = "timed";
  suite.cells = {Cell(Problem(kSeedKey), kFused)};
  EXPECT_THAT(SuiteToJson(suite), Not(HasSubstr("\"graph\"")));
  EXPECT_FALSE(RoundTrip(suite).block.graph);
  suite.block.graph = true;
  EXPECT_THAT(SuiteToJson(suite), HasSubstr("\"graph\":true"));
  const Suite back = RoundTrip(suite);
  EXPECT_TRUE(back.block.graph);
  ExpectSameSuite(back, suite);
  absl::StatusOr<Suite> off = ParseSuite(OneCellSuite(SeedCell(), R"("block": {"graph": false}, )"));
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->block.graph);
}

TEST(Suite, VarlenProblemRoundTripsAsAnObject) {
  Suite suite;
  suite.name = "varlen";
  suite.device_class = "cuda/NVIDIA-H200/sm90";
  suite.cells = {Cell(VarlenProblem(), "fused/bm128/bs128/t384/bf16/st2")};
  const std::string text = SuiteToJson(suite);
  EXPECT_THAT(text, HasSubstr("\"cu_seqlens_q\":[0,5,12,30]"));
  EXPECT_THAT(text, HasSubstr("\"kind\":\"prefill\""));
  EXPECT_THAT(text, HasSubstr("\"dtype\":\"bf16\""));
  ExpectSameSuite(RoundTrip(suite), suite);
}

TEST(Suite, PaddedProblemAndUnkeyableScaleRoundTripAsObjects) {
  AttentionProblem scaled = Problem(kSeedKey);
  scaled.softmax_scale = 0.1234567f;  // the key keeps six digits: it parses back to another scale
  Suite suite;
  suite.name = "padded";
  suite.cells = {Cell(PaddedProblem(), "fused/bm64/bs64/t1/fp16/st1"), Cell(scaled, kFused)};
  const std::string text = SuiteToJson(suite);
  EXPECT_THAT(text, HasSubstr("\"kv_valid_lens\":[64,17]"));
  EXPECT_THAT(text, Not(HasSubstr("/scale")));
  ExpectSameSuite(RoundTrip(suite), suite);
}

TEST(Suite, PickCellRoundTripsWithItsBaselineConfig) {
  SuiteCell pick = Cell(Problem(kSeedKey), kFused, "pick");
  pick.baseline_config = Config("fused/bm32/bs64/t2/fp32/st1");
  EXPECT_EQ(pick.Name(), std::string(kSeedKey) + " " + kFused + " (was fused/bm32/bs64/t2/fp32/st1)");
  EXPECT_EQ(pick.BaselineConfig().Key(), "fused/bm32/bs64/t2/fp32/st1");
  Suite suite;
  suite.name = "picks";
  suite.cells = {pick, Cell(Problem(kSeedKey), kFused)};
  const Suite back = RoundTrip(suite);
  ExpectSameSuite(back, suite);
  EXPECT_EQ(back.cells[1].Name(), std::string(kSeedKey) + " " + kFused);
}

TEST(Suite, LeftOutFieldsTakeTheDefaults) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell()));
  ASSERT_TRUE(suite.ok()) << suite.status();
  const Suite defaults;
  EXPECT_EQ(suite->description, "");
  EXPECT_EQ(suite->device_class, "");
  EXPECT_EQ(suite->block.warmup, defaults.block.warmup);
  EXPECT_EQ(suite->block.repeats, defaults.block.repeats);
  EXPECT_EQ(suite->block.max_seconds, defaults.block.max_seconds);
  EXPECT_EQ(suite->block.flush_l2, defaults.block.flush_l2);
  EXPECT_EQ(suite->blocks, defaults.blocks);
  EXPECT_FALSE(suite->rounds_across_problems);
  ASSERT_EQ(suite->cells.size(), 1u);
  EXPECT_EQ(suite->cells[0].role, "best");
  EXPECT_FALSE(suite->cells[0].baseline_config.has_value());
  EXPECT_EQ(suite->RunLabel(), "bench:t");
}

TEST(Suite, ProblemJsonHoldsEveryFieldAndReadsBack) {
  AttentionProblem decode = Problem("decode/b4/hq8/hkv1/q1/k512/d128/causal1/fp16");
  decode.softmax_scale = 0.25f;
  AttentionProblem paged = PaddedProblem();
  paged.kind = ProblemKind::kDecode;
  paged.q_len = 1;
  paged.page_block_size = 4;
  paged.kv_pool_pages = 100;
  paged.block_table_width = 64;
  paged.shared_prefix_pages = 1;
  for (const AttentionProblem& p : {decode, VarlenProblem(), PaddedProblem(), paged}) {
    ASSERT_TRUE(p.Validate().ok()) << p.Key() << ": " << p.Validate();
    const std::string text = ProblemToJson(p);
    for (const char* field : {"kind", "batch", "q_heads", "kv_heads", "q_len", "kv_len", "cu_seqlens_q",
                              "cu_seqlens_k", "kv_valid_lens", "head_dim", "causal", "dtype", "softmax_scale",
                              "page_block_size", "kv_pool_pages", "block_table_width", "shared_prefix_pages"}) {
      EXPECT_THAT(text, HasSubstr(std::string("\"") + field + "\"")) << text;
    }
    absl::StatusOr<AttentionProblem> back = ProblemFromJson(text);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(ProblemToJson(*back), text);
    EXPECT_EQ(back->Key(), p.Key());
  }
  EXPECT_THAT(ProblemToJson(decode), HasSubstr("\"kind\":\"decode\""));
  EXPECT_THAT(ProblemToJson(decode), HasSubstr("\"dtype\":\"fp16\""));
}

TEST(Suite, AnE4m3ProblemKeepsItsKvStorageAsAKeyAndAsAnObject) {
  AttentionProblem varlen = VarlenProblem();
  varlen.dtype = DType::kBf16;
  varlen.kv_storage = KvStorage::kE4m3;
  ASSERT_TRUE(varlen.Validate().ok()) << varlen.Validate();
  const std::string text = ProblemToJson(varlen);
  EXPECT_THAT(text, HasSubstr("\"kv_storage\":\"e4m3\"")) << text;
  absl::StatusOr<AttentionProblem> back = ProblemFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->kv_storage, KvStorage::kE4m3);
  EXPECT_EQ(back->Key(), varlen.Key());
  // Not quantised: no field, so a build from before it reads the object.
  EXPECT_THAT(ProblemToJson(VarlenProblem()), Not(HasSubstr("kv_storage")));
  absl::StatusOr<AttentionProblem> keyed =
      ProblemFromJson(R"("decode/b16/hq32/hkv8/q1/k8192/d128/causal1/bf16/page16/kve4m3")");
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  EXPECT_EQ(keyed->kv_storage, KvStorage::kE4m3);
  EXPECT_FALSE(ProblemFromJson(R"({"q_len": 8, "kv_len": 8, "dtype": "fp16", "kv_storage": "e5m2"})").ok());
  EXPECT_FALSE(ProblemFromJson(R"({"q_len": 8, "kv_len": 8, "kv_storage": "e4m3"})").ok()) << "fp32 queries";
}

TEST(Suite, ProblemFromJsonAcceptsAKeyAndLeftOutFieldsTakeTheDefaults) {
  absl::StatusOr<AttentionProblem> keyed = ProblemFromJson(std::string("\"") + kSeedKey + "\"");
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  EXPECT_EQ(keyed->Key(), kSeedKey);
  absl::StatusOr<AttentionProblem> sparse = ProblemFromJson(R"({"q_len": 8, "kv_len": 16, "dtype": "bf16"})");
  ASSERT_TRUE(sparse.ok()) << sparse.status();
  EXPECT_EQ(sparse->Key(), "prefill/b1/hq1/hkv1/q8/k16/d64/causal0/bf16");
}

TEST(Suite, ProblemFromJsonRefusesUnknownFieldsWrongTypesAndInvalidProblems) {
  struct Case {
    const char* json;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"q_len": 8, "kv_len": 8, "heads": 4})", "heads: unknown field"},
      {R"({"q_len": "8", "kv_len": 8})", "q_len: must be an integer"},
      {R"({"q_len": 8.5, "kv_len": 8})", "q_len: must be an integer"},
      {R"({"q_len": 8, "kv_len": 8, "batch": 4294967296})", "batch: out of range"},
      {R"({"q_len": 8, "kv_len": 8, "causal": 1})", "causal: must be true or false"},
      {R"({"q_len": 8, "kv_len": 8, "dtype": "fp8"})", "dtype: unknown dtype"},
      {R"({"q_len": 8, "kv_len": 8, "kind": "encode"})", "kind: unknown problem kind"},
      {R"({"q_len": 8, "kv_len": 8, "softmax_scale": "x"})", "softmax_scale: must be a number"},
      {R"({"q_len": 8, "kv_len": 8, "softmax_scale": 1e300})", "softmax_scale: out of range"},
      {R"({"q_len": 8, "kv_len": 8, "softmax_scale": -1})", "softmax_scale must be in"},
      {R"({"q_len": 8, "kv_len": 8, "kv_valid_lens": [8, "x"]})", "kv_valid_lens[1]: must be an integer"},
      {R"({"q_len": 8, "kv_len": 8, "q_heads": 6, "kv_heads": 4})", "must divide"},
      {R"({"q_len": 8, "kv_len": 8, "kv_pool_pages": 16})", "describe a paged cache"},
      {R"({"q_len": 8, "kv_len": 8, "page_block_size": 300})", "page_block_size must be in"},
      {R"([1, 2])", "a problem key or an object"},
      {R"("prefill/b1/hq12")", "malformed problem key"},
      {R"({"q_len": 8,)", "malformed JSON"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<AttentionProblem> p = ProblemFromJson(c.json);
    ASSERT_FALSE(p.ok()) << c.json;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.json << ": " << p.status();
    EXPECT_THAT(std::string(p.status().message()), HasSubstr(c.message_part)) << c.json;
  }
}

TEST(Suite, MalformedJsonAndWrongDocumentsAreInvalid) {
  ExpectInvalid(R"({"name": "t", "cells": [)", "malformed JSON");
  ExpectInvalid(R"(["t"])", "must be a JSON object");
  ExpectInvalid("", "malformed JSON");
}

TEST(Suite, NameMustBePresentAndValid) {
  ExpectInvalid(R"({"cells": [)" + SeedCell() + "]}", "name: missing");
  ExpectInvalid(R"({"name": 3, "cells": [)" + SeedCell() + "]}", "name: must be a string");
  ExpectInvalid(R"({"name": "a b", "cells": [)" + SeedCell() + "]}", "name: suite name 'a b' must be");
  ExpectInvalid(R"({"name": "", "cells": [)" + SeedCell() + "]}", "name: suite name");
}

TEST(Suite, ValidateSuiteNameAllowsLettersDigitsDotsUnderscoresAndDashes) {
  EXPECT_TRUE(ValidateSuiteName("h200-nightly_v.2").ok());
  EXPECT_TRUE(ValidateSuiteName(std::string(64, 'a')).ok());
  EXPECT_EQ(ValidateSuiteName(std::string(65, 'a')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSuiteName("").code(), absl::StatusCode::kInvalidArgument);
  for (const char* bad : {"a/b", "a b", "bench:x", "ä"}) {
    EXPECT_EQ(ValidateSuiteName(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(Suite, UnknownFieldsAreInvalidAndNamed) {
  ExpectInvalid(OneCellSuite(SeedCell(), R"("blokcs": 10, )"), "blokcs: unknown field");
  ExpectInvalid(OneCellSuite(SeedCell(R"(, "rol": "best")")), "cells[0].rol: unknown field");
  ExpectInvalid(OneCellSuite(SeedCell(), R"("block": {"repeat": 5}, )"), "block.repeat: unknown field");
  ExpectInvalid(OneCellSuite(R"({"problem": {"q_len": 8, "kv_len": 8, "causual": true}, "config": ")" +
                             std::string(kFused) + "\"}"),
                "cells[0].problem.causual: unknown field");
}

TEST(Suite, InvalidProblemsAndConfigsNameTheCellAndField) {
  ExpectInvalid(OneCellSuite(R"({"problem": "prefill/b1/hq12/hkv5/q128/k128/d64/causal0/fp32", "config": ")" +
                             std::string(kFused) + "\"}"),
                "cells[0].problem: kv_heads (5) must divide");
  ExpectInvalid(OneCellSuite(std::string(R"({"problem": ")") + kSeedKey + R"(", "config": "fused/bm64/bs64"})"),
                "cells[0].config: malformed config key");
  ExpectInvalid(OneCellSuite(std::string(R"({"problem": ")") + kSeedKey +
                             R"(", "config": "fused/bm64/bs64/t1/fp32/st9"})"),
                "cells[0].config: stages must be in");
  ExpectInvalid(OneCellSuite(std::string(R"({"problem": ")") + kSeedKey + R"(", "config": 7})"),
                "cells[0].config: must be a string");
  ExpectInvalid(OneCellSuite(R"({"config": ")" + std::string(kFused) + "\"}"), "cells[0].problem: missing");
  ExpectInvalid(OneCellSuite(std::string(R"({"problem": ")") + kSeedKey + "\"}"), "cells[0].config: missing");
  ExpectInvalid(OneCellSuite(SeedCell(R"(, "role": "fastest")")), "cells[0].role: unknown role 'fastest'");
}

TEST(Suite, AProblemKeyThatDoesNotParseBackIsInvalid) {
  const std::string varlen_key = VarlenProblem().Key();
  ExpectInvalid(OneCellSuite(R"({"problem": ")" + varlen_key + R"(", "config": ")" + kFused + "\"}"),
                "cells[0].problem: key '" + varlen_key + "' names length lists by hash only");
}

TEST(Suite, BaselineConfigGoesWithThePickRoleOnly) {
  ExpectInvalid(OneCellSuite(SeedCell(R"(, "role": "pick")")), "cells[0].baseline_config: a cell has one");
  ExpectInvalid(OneCellSuite(SeedCell(R"(, "baseline_config": "fused/bm32/bs64/t2/fp32/st1")")),
                "cells[0].baseline_config: a cell has one");
  ExpectInvalid(OneCellSuite(SeedCell(R"(, "role": "pick", "baseline_config": "fused/bm32")")),
                "cells[0].baseline_config: malformed config key");
}

TEST(Suite, BlockOptionsOutOfRangeAreInvalid) {
  struct Case {
    const char* block;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"repeats": 0})", "block.repeats: must be in [1, 100000]"},
      {R"({"repeats": 100001})", "block.repeats: must be in [1, 100000]"},
      {R"({"warmup": -1})", "block.warmup: must be in [0, 1000]"},
      {R"({"warmup": 1001})", "block.warmup: must be in [0, 1000]"},
      {R"({"max_seconds": 0})", "block.max_seconds: must be > 0"},
      {R"({"max_seconds": -1.5})", "block.max_seconds: must be > 0"},
      {R"({"max_seconds": "1"})", "block.max_seconds: must be a number"},
      {R"({"flush_l2": "yes"})", "block.flush_l2: must be true or false"},
      {R"({"graph": 1})", "block.graph: must be true or false"},
      {R"([1])", "block: must be an object"},
  };
  for (const Case& c : cases) ExpectInvalid(OneCellSuite(SeedCell(), std::string(R"("block": )") + c.block + ", "), c.message_part);
  absl::StatusOr<Suite> edges = ParseSuite(OneCellSuite(
      SeedCell(), R"("block": {"warmup": 0, "repeats": 100000, "max_seconds": 3, "flush_l2": false}, )"));
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(edges->block.warmup, 0);
  EXPECT_EQ(edges->block.repeats, 100000);
  EXPECT_EQ(edges->block.max_seconds, 3.0);
  EXPECT_FALSE(edges->block.flush_l2);
}

TEST(Suite, BlocksOutsideThreeToAThousandAreInvalid) {
  ExpectInvalid(OneCellSuite(SeedCell(), R"("blocks": 2, )"), "blocks: must be in [3, 1000]");
  ExpectInvalid(OneCellSuite(SeedCell(), R"("blocks": 1001, )"), "blocks: must be in [3, 1000]");
  ExpectInvalid(OneCellSuite(SeedCell(), R"("blocks": 10.0, )"), "blocks: must be an integer");
  for (int blocks : {3, 1000}) {
    absl::StatusOr<Suite> suite =
        ParseSuite(OneCellSuite(SeedCell(), R"("blocks": )" + std::to_string(blocks) + ", "));
    ASSERT_TRUE(suite.ok()) << suite.status();
    EXPECT_EQ(suite->blocks, blocks);
  }
}

TEST(Suite, RoundsAcrossProblemsIsABooleanThatRoundTrips) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell(), R"("rounds_across_problems": true, )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_TRUE(suite->rounds_across_problems);
  EXPECT_THAT(SuiteToJson(*suite), HasSubstr("\"rounds_across_problems\": true"));
  ExpectSameSuite(RoundTrip(*suite), *suite);
  ExpectInvalid(OneCellSuite(SeedCell(), R"("rounds_across_problems": 1, )"),
                "rounds_across_problems: must be true or false");
}

TEST(Suite, MinFloorIsAFractionThatRoundTrips) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell(), R"("min_floor": 0.005, )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_TRUE(suite->min_floor.has_value());
  EXPECT_DOUBLE_EQ(*suite->min_floor, 0.005);
  EXPECT_THAT(SuiteToJson(*suite), HasSubstr("\"min_floor\": 0.005"));
  EXPECT_DOUBLE_EQ(*RoundTrip(*suite).min_floor, 0.005);
  absl::StatusOr<Suite> without = ParseSuite(OneCellSuite(SeedCell(), ""));
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->min_floor.has_value());
  EXPECT_THAT(SuiteToJson(*without), Not(HasSubstr("min_floor")));
  for (const char* bad : {R"("min_floor": -0.01, )", R"("min_floor": 0.2, )", R"("min_floor": "1%", )"}) {
    ExpectInvalid(OneCellSuite(SeedCell(), bad), "min_floor: must be a number in [0, 0.1]");
  }
}

TEST(Suite, CalibratedMinFloorIsAFractionThatRoundTrips) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell(), R"("calibrated_min_floor": 0.0075, )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_TRUE(suite->calibrated_min_floor.has_value());
  EXPECT_DOUBLE_EQ(*suite->calibrated_min_floor, 0.0075);
  EXPECT_FALSE(suite->min_floor.has_value());
  EXPECT_DOUBLE_EQ(*RoundTrip(*suite).calibrated_min_floor, 0.0075);
  absl::StatusOr<Suite> without = ParseSuite(OneCellSuite(SeedCell(), ""));
  ASSERT_TRUE(without.ok());
  EXPECT_THAT(SuiteToJson(*without), Not(HasSubstr("calibrated_min_floor")));
  for (const char* bad : {R"("calibrated_min_floor": -0.01, )", R"("calibrated_min_floor": 0.5, )",
                          R"("calibrated_min_floor": null, )"}) {
    ExpectInvalid(OneCellSuite(SeedCell(), bad), "calibrated_min_floor: must be a number in [0, 0.1]");
  }
}

TEST(Suite, CorrectionIsANamedAdjustmentThatRoundTrips) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell(), R"("correction": "none", )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_TRUE(suite->correction.has_value());
  EXPECT_EQ(*suite->correction, regress::Correction::kNone);
  EXPECT_EQ(*RoundTrip(*suite).correction, regress::Correction::kNone);
  suite = ParseSuite(OneCellSuite(SeedCell(), R"("correction": "benjamini-hochberg", )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_EQ(*suite->correction, regress::Correction::kBenjaminiHochberg);
  absl::StatusOr<Suite> without = ParseSuite(OneCellSuite(SeedCell(), ""));
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->correction.has_value());
  EXPECT_THAT(SuiteToJson(*without), Not(HasSubstr("correction")));
  ExpectInvalid(OneCellSuite(SeedCell(), R"("correction": "bonferroni", )"),
                "correction: unknown correction 'bonferroni' (none, holm or benjamini-hochberg)");
  ExpectInvalid(OneCellSuite(SeedCell(), R"("correction": 1, )"), "correction: a string expected");
}

TEST(Suite, RoundOrderIsANamedOrderThatRoundTrips) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell(), R"("round_order": "mirrored", )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_TRUE(suite->round_order.has_value());
  EXPECT_EQ(*suite->round_order, RoundOrder::kMirrored);
  EXPECT_EQ(*RoundTrip(*suite).round_order, RoundOrder::kMirrored);
  suite = ParseSuite(OneCellSuite(SeedCell(), R"("round_order": "shuffled", )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_EQ(*suite->round_order, RoundOrder::kShuffled);
  absl::StatusOr<Suite> without = ParseSuite(OneCellSuite(SeedCell(), ""));
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->round_order.has_value());
  EXPECT_THAT(SuiteToJson(*without), Not(HasSubstr("round_order")));
  ExpectInvalid(OneCellSuite(SeedCell(), R"("round_order": "random", )"),
                "round_order: unknown round order 'random' (one of shuffled, mirrored)");
  ExpectInvalid(OneCellSuite(SeedCell(), R"("round_order": true, )"), "round_order: a string expected");
  for (RoundOrder order : kRoundOrders) {
    absl::StatusOr<RoundOrder> back = ParseRoundOrderName(RoundOrderName(order));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, order);
  }
}

TEST(Suite, MaxMeasureSecondsIsABudgetInSecondsThatRoundTrips) {
  absl::StatusOr<Suite> suite = ParseSuite(OneCellSuite(SeedCell(), R"("max_measure_seconds": 600, )"));
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_TRUE(suite->max_measure_seconds.has_value());
  EXPECT_DOUBLE_EQ(*suite->max_measure_seconds, 600);
  EXPECT_DOUBLE_EQ(*RoundTrip(*suite).max_measure_seconds, 600);
  absl::StatusOr<Suite> without = ParseSuite(OneCellSuite(SeedCell(), ""));
  ASSERT_TRUE(without.ok());
  EXPECT_FALSE(without->max_measure_seconds.has_value());
  EXPECT_THAT(SuiteToJson(*without), Not(HasSubstr("max_measure_seconds")));
  for (const char* bad : {R"("max_measure_seconds": -1, )", R"("max_measure_seconds": 90000, )",
                          R"("max_measure_seconds": "10 min", )"}) {
    ExpectInvalid(OneCellSuite(SeedCell(), bad),
                  "max_measure_seconds: must be a number of seconds in [0, 86400] (0: no budget)");
  }
}

TEST(Suite, NoCellsIsInvalid) {
  ExpectInvalid(R"({"name": "t", "cells": []})", "cells: a suite needs at least one cell");
  ExpectInvalid(R"({"name": "t"})", "cells: missing");
  ExpectInvalid(R"({"name": "t", "cells": {}})", "cells: must be an array");
  ExpectInvalid(R"({"name": "t", "cells": ["x"]})", "cells[0]: must be an object");
}

TEST(Suite, DuplicateCellsAreInvalidButOtherRolesOrBaselinesAreNot) {
  const std::string cell = SeedCell();
  ExpectInvalid(R"({"name": "t", "cells": [)" + cell + "," + SeedCell(R"(, "role": "materialized")") + "," + cell +
                    "]}",
                "cells[2]: the same problem, config, role and baseline config as cells[0]");
  // The same problem written as an object is the same problem.
  const std::string as_object = std::string(R"({"problem": {"q_heads": 12, "kv_heads": 12, "q_len": 128, )") +
                                R"("kv_len": 128}, "config": ")" + kFused + "\"}";
  ExpectInvalid(R"({"name": "t", "cells": [)" + cell + "," + as_object + "]}", "cells[1]: the same problem");
  const std::string pick_a = SeedCell(R"(, "role": "pick", "baseline_config": "fused/bm32/bs64/t2/fp32/st1")");
  const std::string pick_b = SeedCell(R"(, "role": "pick", "baseline_config": "fused/bm16/bs64/t2/fp32/st1")");
  absl::StatusOr<Suite> suite = ParseSuite(R"({"name": "t", "cells": [)" + cell + "," +
                                           SeedCell(R"(, "role": "reference")") + "," + pick_a + "," + pick_b +
                                           "]}");
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_EQ(suite->cells.size(), 4u);
  ExpectInvalid(R"({"name": "t", "cells": [)" + pick_a + "," + pick_a + "]}", "cells[1]: the same problem");
}

TEST(Suite, ReadSuiteFileNamesThePath) {
  const std::string missing = ::testing::TempDir() + "/no-such-suite.json";
  absl::StatusOr<Suite> none = ReadSuiteFile(missing);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(missing));

  const std::string bad = ::testing::TempDir() + "/bad-suite.json";
  std::ofstream(bad) << OneCellSuite(SeedCell(), R"("blocks": 1, )");
  absl::StatusOr<Suite> invalid = ReadSuiteFile(bad);
  EXPECT_EQ(invalid.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(invalid.status().message()), HasSubstr(bad + ": blocks: must be in"));

  const std::string good = ::testing::TempDir() + "/good-suite.json";
  std::ofstream(good) << OneCellSuite(SeedCell());
  absl::StatusOr<Suite> read = ReadSuiteFile(good);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->cells.size(), 1u);
}

Trial MadeTrial(std::string_view problem_key, std::string_view config_key, double median_us,
                TrialOutcome outcome = TrialOutcome::kOk) {
  Trial t;
  t.problem_key = std::string(problem_key);
  t.config_key = std::string(config_key);
  t.outcome = outcome;
  t.median_us = median_us;
  return t;
}

SuiteSource Source(std::string_view problem_key, std::string_view config_key, std::vector<Trial> trials = {}) {
  SuiteSource s;
  s.best.device_class = "cpu/test/avx2";
  s.best.problem_key = std::string(problem_key);
  s.best.config_key = std::string(config_key);
  s.provenance_trials = std::move(trials);
  return s;
}

TEST(SuiteFromBestConfigs, BestReferenceAndFastestVerifiedMaterializedPerProblem) {
  const std::string other = "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32";
  const std::vector<Trial> trials = {
      MadeTrial(kSeedKey, "materialized/bm64/bs64/t2/fp32/st1", 900),
      MadeTrial(kSeedKey, "materialized/bm32/bs64/t2/fp32/st1", 700),
      MadeTrial(kSeedKey, "materialized/bm16/bs64/t2/fp32/st1", 100, TrialOutcome::kVerifyFailed),
      MadeTrial(other, "materialized/bm16/bs16/t2/fp32/st1", 50),  // another problem's
      MadeTrial(kSeedKey, "partial/bm64/bs64/t2/fp32/st1", 300),
      MadeTrial(kSeedKey, kFused, 200),
  };
  std::vector<std::string> skipped;
  absl::StatusOr<Suite> suite = SuiteFromBestConfigs("cpu-db", "cpu/test/avx2", "cpu",
                                                     {Source(kSeedKey, kFused, trials)}, &skipped);
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_TRUE(skipped.empty());
  EXPECT_EQ(suite->name, "cpu-db");
  EXPECT_EQ(suite->device_class, "cpu/test/avx2");
  ASSERT_EQ(suite->cells.size(), 3u);
  EXPECT_EQ(suite->cells[0].Name(), std::string(kSeedKey) + " " + kFused);
  EXPECT_EQ(suite->cells[0].role, "best");
  EXPECT_EQ(suite->cells[1].config, *DefaultConfig("cpu", Problem(kSeedKey)));
  EXPECT_EQ(suite->cells[1].role, "reference");
  EXPECT_EQ(suite->cells[2].config.Key(), "materialized/bm32/bs64/t2/fp32/st1");
  EXPECT_EQ(suite->cells[2].role, "materialized");
  ExpectSameSuite(RoundTrip(*suite), *suite);
}

TEST(SuiteFromBestConfigs, LeavesOutAReferenceEqualToThePickAndSkipsVarlenKeys) {
  const std::string pick = DefaultConfig("cpu", Problem(kSeedKey))->Key();
  std::vector<std::string> skipped;
  absl::StatusOr<Suite> suite = SuiteFromBestConfigs(
      "cpu-db", "cpu/test/avx2", "cpu", {Source(VarlenProblem().Key(), kFused), Source(kSeedKey, pick)}, &skipped);
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_EQ(skipped, std::vector<std::string>{VarlenProblem().Key()});
  ASSERT_EQ(suite->cells.size(), 1u);  // no reference (the pick), no materialized (no trials)
  EXPECT_EQ(suite->cells[0].config.Key(), pick);
  EXPECT_EQ(suite->cells[0].role, "best");
}

TEST(SuiteFromBestConfigs, AMaterializedPickIsNotRepeatedAndABadConfigKeyIsSkipped) {
  const std::string other = "prefill/b1/hq12/hkv12/q256/k256/d64/causal0/fp32";
  std::vector<std::string> skipped;
  absl::StatusOr<Suite> suite = SuiteFromBestConfigs(
      "cpu-db", "cpu/test/avx2", "cpu",
      {Source(kSeedKey, kMaterialized, {MadeTrial(kSeedKey, kMaterialized, 300)}), Source(other, "fused/bm64")},
      &skipped);
  ASSERT_TRUE(suite.ok()) << suite.status();
  EXPECT_EQ(skipped, std::vector<std::string>{other});
  ASSERT_EQ(suite->cells.size(), 2u);
  EXPECT_EQ(suite->cells[0].config.Key(), kMaterialized);
  EXPECT_EQ(suite->cells[0].role, "best");
  EXPECT_EQ(suite->cells[1].role, "reference");
}

TEST(SuiteFromBestConfigs, AnUnknownBackendHasNoReferenceCell) {
  absl::StatusOr<Suite> suite =
      SuiteFromBestConfigs("x", "tpu/v9", "tpu", {Source(kSeedKey, kFused)}, nullptr);
  ASSERT_TRUE(suite.ok()) << suite.status();
  ASSERT_EQ(suite->cells.size(), 1u);
  EXPECT_EQ(suite->cells[0].role, "best");
}

TEST(SuiteFromBestConfigs, InvalidNameOrNoCellsIsInvalidArgument) {
  EXPECT_EQ(SuiteFromBestConfigs("a b", "cpu/x", "cpu", {Source(kSeedKey, kFused)}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SuiteFromBestConfigs("empty", "cpu/x", "cpu", {}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> skipped;
  absl::StatusOr<Suite> only_varlen =
      SuiteFromBestConfigs("v", "cpu/x", "cpu", {Source(VarlenProblem().Key(), kFused)}, &skipped);
  EXPECT_EQ(only_varlen.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(only_varlen.status().message()), HasSubstr("1 skipped"));
  EXPECT_EQ(skipped.size(), 1u);
}

// The suites checked in under suites/.
std::vector<std::filesystem::path> CheckedInSuites() {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(FUSETUNE_SOURCE_DIR) / "suites")) {
    if (entry.path().extension() == ".json") out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Suite ReadCheckedIn(const std::string& name) {
  absl::StatusOr<Suite> suite =
      ReadSuiteFile((std::filesystem::path(FUSETUNE_SOURCE_DIR) / "suites" / (name + ".json")).string());
  EXPECT_TRUE(suite.ok()) << suite.status();
  return suite.ok() ? *suite : Suite{};
}

TEST(CheckedInSuites, EveryFileParsesUnderItsOwnName) {
  const std::vector<std::filesystem::path> files = CheckedInSuites();
  ASSERT_GE(files.size(), 2u);
  for (const std::filesystem::path& file : files) {
    absl::StatusOr<Suite> suite = ReadSuiteFile(file.string());
    ASSERT_TRUE(suite.ok()) << suite.status();
    EXPECT_EQ(suite->name, file.stem().string());
    ExpectSameSuite(RoundTrip(*suite), *suite);
  }
}

// Reference cells pin the backend's default; every problem has its tuned pick.
void ExpectDefaultReferencesAndABestPerProblem(const Suite& suite, std::string_view backend) {
  for (const SuiteCell& cell : suite.cells) {
    if (cell.role != "reference") continue;
    EXPECT_EQ(cell.config, *DefaultConfig(backend, cell.problem)) << cell.Name();
  }
  for (const SuiteCell& cell : suite.cells) {
    const bool has_best = std::any_of(suite.cells.begin(), suite.cells.end(), [&](const SuiteCell& c) {
      return c.role == "best" && c.problem.Key() == cell.problem.Key();
    });
    EXPECT_TRUE(has_best) << cell.Name() << " has no best cell for its problem";
  }
}

TEST(CheckedInSuites, CpuSuiteIsSmallAndRunsOnTheCpuBackend) {
  const Suite suite = ReadCheckedIn("cpu");
  EXPECT_EQ(suite.device_class, "");
  EXPECT_LE(suite.cells.size(), 16u);  // a few small prefill and decode problems: under a second in CI
  EXPECT_FALSE(suite.block.flush_l2);
  ExpectDefaultReferencesAndABestPerProblem(suite, "cpu");
  absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  for (const SuiteCell& cell : suite.cells) {
    EXPECT_LE(cell.config.threads, 2) << cell.Name() << ": more threads than a 2-core runner has";
    EXPECT_TRUE((*cpu)->CanImplement(cell.problem, cell.config).ok()) << cell.Name();
  }
}

TEST(CheckedInSuites, H200SuiteCoversTheTunedShapes) {
  const Suite suite = ReadCheckedIn("h200");
  EXPECT_EQ(suite.device_class, "cuda/NVIDIA-H200/sm90");
  EXPECT_GE(suite.cells.size(), 24u);
  EXPECT_TRUE(suite.block.flush_l2);
  // The nightly's setting as measured on Hopper (docs/perf.md, "the suite graph-timed in
  // mirrored rounds"): graph-timed blocks, mirrored rounds, at most 10 minutes of measuring.
  EXPECT_TRUE(suite.block.graph);
  EXPECT_EQ(suite.round_order, RoundOrder::kMirrored);
  ASSERT_TRUE(suite.max_measure_seconds.has_value());
  EXPECT_GT(*suite.max_measure_seconds, 0);
  EXPECT_LE(*suite.max_measure_seconds, 600);
  ExpectDefaultReferencesAndABestPerProblem(suite, "cuda");
  for (const char* role : {"best", "reference", "materialized"}) {
    EXPECT_TRUE(std::any_of(suite.cells.begin(), suite.cells.end(),
                            [&](const SuiteCell& c) { return c.role == role; }))
        << role;
  }
  EXPECT_TRUE(std::any_of(suite.cells.begin(), suite.cells.end(),
                          [](const SuiteCell& c) { return c.problem.is_varlen(); }));
}

#ifdef FUSETUNE_HAVE_CUDA_FUSED
// Host-only: every fused cell of the H200 suite has a compiled instance the H200 accepts
// (sm_90, 227 KiB of shared memory per block): the fused kernel's for a contiguous prefill, the
// decode family's for decode and paged problems. No GPU is touched.
TEST(CheckedInSuites, H200FusedCellsHaveCompiledInstances) {
  int checked = 0;
  for (const SuiteCell& cell : ReadCheckedIn("h200").cells) {
    if (cell.config.variant != Variant::kFused) continue;
    const absl::Status can = cuda::UsesDecodeFamily(cell.problem)
                                 ? cuda::DecodeCanImplement(cell.problem, cell.config, 227 * 1024)
                                 : cuda::FusedCanImplement(cell.problem, cell.config, 227 * 1024, 90);
    EXPECT_TRUE(can.ok()) << cell.Name() << ": " << can;
    ++checked;
  }
  EXPECT_GE(checked, 24);
}
#else
TEST(CheckedInSuites, H200FusedCellsHaveCompiledInstances) {
  GTEST_SKIP() << "built without the CUDA fused kernel (FUSETUNE_WITH_CUDA=OFF or no nvcc)";
}
#endif

}  // namespace
}  // namespace fusetune::regress
