#include "best_config_json.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::cli {
namespace {

BestConfig Recorded() {
  BestConfig b;
  b.device_class = "cpu/test/avx2";
  b.problem_key = "prefill/b1/hq2/hkv2/q64/k64/d32/causal1/fp32";
  b.config_key = "fused/bm16/bs16/t1/fp32/st1";
  b.median_us = 10;
  b.p10_us = 9;
  b.p90_us = 12;
  b.max_abs_error = 1e-6;
  b.max_rel_error = 2e-6;
  b.speedup_vs_materialized = 1.5;
  b.speedup_vs_partial = 1.25;
  b.best_materialized_us = 15;
  b.best_partial_us = 12.5;
  b.run_id = 7;
  b.commit = "0123456789ab";
  return b;
}

const std::vector<std::string> kRecordedFields = {
    "device_class", "problem", "config", "median_us", "p10_us", "p90_us", "tflops", "speedup_vs_materialized",
    "speedup_vs_partial", "best_materialized_us", "best_partial_us", "max_abs_error", "max_rel_error", "run_id",
    "commit"};

TEST(BestConfigJson, RecordedBestHasEveryFieldAndNoProvenance) {
  const nlohmann::json j = BestConfigJson(Recorded());
  EXPECT_EQ(j.size(), kRecordedFields.size()) << j.dump();
  for (const std::string& field : kRecordedFields) EXPECT_TRUE(j.contains(field)) << field << " in " << j.dump();
  EXPECT_FALSE(j.contains("provenance"));
  EXPECT_EQ(j["problem"], "prefill/b1/hq2/hkv2/q64/k64/d32/causal1/fp32");
  EXPECT_EQ(j["config"], "fused/bm16/bs16/t1/fp32/st1");
  EXPECT_EQ(j["p90_us"].get<double>(), 12);
  EXPECT_EQ(j["speedup_vs_partial"].get<double>(), 1.25);
  EXPECT_EQ(j["run_id"].get<int64_t>(), 7);
  EXPECT_GT(j["tflops"].get<double>(), 0);
}

TEST(BestConfigJson, ServiceAnswerAddsProvenanceAndNullsWhatTheAnswerLacks) {
  BestConfig answer = Recorded();
  answer.problem_key = "prefill/b1/hq2/hkv2/q128/k128/d32/causal1/fp32";
  const nlohmann::json j =
      BestConfigJson(answer, BestConfigProvenance{"nearest", "prefill/b1/hq2/hkv2/q64/k64/d32/causal1/fp32", 2});
  EXPECT_EQ(j.size(), kRecordedFields.size() + 3) << j.dump();
  for (const std::string& field : kRecordedFields) EXPECT_TRUE(j.contains(field)) << field << " in " << j.dump();
  EXPECT_EQ(j["provenance"], "nearest");
  EXPECT_EQ(j["source_problem"], "prefill/b1/hq2/hkv2/q64/k64/d32/causal1/fp32");
  EXPECT_EQ(j["distance"].get<double>(), 2);
  for (const char* field :
       {"p10_us", "p90_us", "speedup_vs_partial", "best_materialized_us", "best_partial_us", "max_abs_error"}) {
    EXPECT_TRUE(j[field].is_null()) << field;
  }
  // The latency is the source problem's, and so is the TFLOP/s.
  EXPECT_EQ(j["tflops"].get<double>(), BestConfigJson(Recorded())["tflops"].get<double>());
  EXPECT_EQ(j["median_us"].get<double>(), 10);
}

TEST(BestConfigJson, TflopsIsZeroWithoutALatencyOrAKeyToRebuild) {
  EXPECT_EQ(BestConfigTflops("prefill/b1/hq2/hkv2/q64/k64/d32/causal1/fp32", 0), 0);
  EXPECT_EQ(BestConfigTflops("not a key", 10), 0);
}

}  // namespace
}  // namespace fusetune::cli
