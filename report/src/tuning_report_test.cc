#include "fusetune/report/tuning_report.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fmt/format.h"
#include "fusetune/report/html.h"
#include "gtest/gtest.h"
#include "testing/report_fixtures.h"
#include "testing/xml_reader.h"

namespace fusetune::report {
namespace {

using testing::Find;
using testing::ParseXmlPage;
using testing::XmlElement;

std::unique_ptr<Store> FilledStore() {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  EXPECT_TRUE(store.ok()) << store.status();
  testing::FillTuningStore(**store);
  return *std::move(store);
}

const XmlElement* ProblemSection(const XmlElement& root, const std::string& problem_key) {
  for (const XmlElement* s : Find(root, "section", "problem")) {
    if (!Find(*s, "h3").empty() && Find(*s, "h3")[0]->text == problem_key) return s;
  }
  return nullptr;
}

TEST(TuningReport, ReadsEveryPickWithItsRunsTrialsAndNewestAudit) {
  std::unique_ptr<Store> store = FilledStore();
  absl::StatusOr<TuningReport> r = ReadTuningReport(*store, "", "test.db");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(r->devices[0].device_class, testing::TestCpu().DeviceClass());
  const DeviceResults& gpu = r->devices[1];
  EXPECT_EQ(gpu.device_class, "cuda/NVIDIA-H200/sm90");
  ASSERT_EQ(gpu.problems.size(), 2u);
  ASSERT_EQ(gpu.runs.size(), 1u);
  const ProblemResult* prefill = nullptr;
  for (const ProblemResult& p : gpu.problems) {
    if (p.best.problem_key == testing::kPrefillKey) prefill = &p;
  }
  ASSERT_NE(prefill, nullptr);
  EXPECT_EQ(prefill->configs.size(), 20u);  // 18 fused, a partial and a materialized
  ASSERT_TRUE(prefill->audit.has_value());
  EXPECT_DOUBLE_EQ(prefill->audit->regret, 0.011);
  EXPECT_EQ(prefill->best_sm_clock_mhz, 1755);

  absl::StatusOr<TuningReport> cpu_only = ReadTuningReport(*store, testing::TestCpu().DeviceClass(), "test.db");
  ASSERT_TRUE(cpu_only.ok());
  EXPECT_EQ(cpu_only->devices.size(), 1u);
}

TEST(TuningReportHtml, DrawsOnePanelPerVariantPrecisionAndThreadsWithEveryOutcomeMarked) {
  std::unique_ptr<Store> store = FilledStore();
  const XmlElement root = ParseXmlPage(TuningReportHtml(*ReadTuningReport(*store, "", "test.db")));
  const XmlElement* prefill = ProblemSection(root, testing::kPrefillKey);
  ASSERT_NE(prefill, nullptr);
  // fused t128, fused t256, partial t128, materialized t256.
  const auto panels = Find(*prefill, "figure", "panel");
  ASSERT_EQ(panels.size(), 4u);
  EXPECT_EQ(Find(*panels[0], "figcaption")[0]->text, "fused · bf16 · t128");
  EXPECT_EQ(Find(*panels[1], "figcaption")[0]->text, "fused · bf16 · t256");
  EXPECT_EQ(Find(*panels[0], "g", "config").size(), 9u);
  // The outcomes: two unsupported (one per thread count), one verify and one launch failure.
  EXPECT_EQ(Find(*prefill, "g", "outcome-unsupported").size(), 2u);
  EXPECT_EQ(Find(*prefill, "g", "outcome-verify_failed").size(), 1u);
  EXPECT_EQ(Find(*prefill, "g", "outcome-launch_failed").size(), 1u);
  EXPECT_EQ(Find(*prefill, "g", "outcome-ok").size(), 16u);
  // Hover text names the config, its outcome and why.
  const XmlElement* failed = Find(*prefill, "g", "outcome-verify_failed")[0];
  EXPECT_EQ(Find(*failed, "title")[0]->text,
            "fused/bm128/bs128/t256/bf16/st2: verify_failed — max rel error 3.1e-1 > tolerance 2e-2");
  // Exactly one cell is the pick, and it is the recorded one.
  const auto picks = Find(*prefill, "g", "best");
  ASSERT_EQ(picks.size(), 1u);
  EXPECT_NE(Find(*picks[0], "title")[0]->text.find(std::string(testing::kFusedPick) + ": 54.00 µs (the pick)"),
            std::string::npos);
  // Timed cells are coloured on one scale: the fastest green, the slowest red.
  std::set<std::string> fills;
  for (const XmlElement* g : Find(*prefill, "g", "outcome-ok")) fills.insert(Find(*g, "rect")[0]->Attribute("fill"));
  EXPECT_GT(fills.size(), 5u);
  // The variants side by side, fused first.
  const auto variants = Find(*prefill, "g", "variant");
  ASSERT_EQ(variants.size(), 3u);
  EXPECT_TRUE(variants[0]->HasClass("variant-fused"));
  EXPECT_TRUE(variants[2]->HasClass("variant-materialized"));
}

TEST(TuningReportHtml, StatesThePeakAssumedOrThatItIsUnknown) {
  std::unique_ptr<Store> store = FilledStore();
  const XmlElement root = ParseXmlPage(TuningReportHtml(*ReadTuningReport(*store, "", "test.db")));
  const XmlElement* prefill = ProblemSection(root, testing::kPrefillKey);
  ASSERT_NE(prefill, nullptr);
  const std::string prefill_peak = Find(*prefill, "dd", "peak")[0]->text;
  EXPECT_NE(prefill_peak.find("TFLOP/s"), std::string::npos) << prefill_peak;
  EXPECT_NE(prefill_peak.find("of 989.4 TFLOP/s"), std::string::npos) << prefill_peak;
  const XmlElement* decode = ProblemSection(root, testing::kDecodeKey);
  ASSERT_NE(decode, nullptr);
  const std::string decode_peak = Find(*decode, "dd", "peak")[0]->text;
  EXPECT_NE(decode_peak.find("TB/s = "), std::string::npos) << decode_peak;
  EXPECT_NE(decode_peak.find("of 4.8 TB/s"), std::string::npos) << decode_peak;
  const XmlElement* cpu = ProblemSection(root, "prefill/b1/hq2/hkv2/q128/k128/d32/causal0/fp32");
  ASSERT_NE(cpu, nullptr);
  EXPECT_NE(Find(*cpu, "dd", "peak")[0]->text.find("unknown peak"), std::string::npos);
}

TEST(TuningReportHtml, ShowsTheAuditsRegretWithItsInterval) {
  std::unique_ptr<Store> store = FilledStore();
  const XmlElement root = ParseXmlPage(TuningReportHtml(*ReadTuningReport(*store, "", "test.db")));
  EXPECT_EQ(Find(*ProblemSection(root, testing::kPrefillKey), "dd", "regret")[0]->text,
            "1.10 % (90 % interval 0.40 to 1.90 %, 15 rounds; fastest measured fused/bm64/bs32/t128/bf16/st2)");
  EXPECT_EQ(Find(*ProblemSection(root, testing::kDecodeKey), "dd", "regret")[0]->text, "not audited");
}

TEST(TuningReportHtml, IndexIsSortableAndLinksToEveryProblem) {
  std::unique_ptr<Store> store = FilledStore();
  const XmlElement root = ParseXmlPage(TuningReportHtml(*ReadTuningReport(*store, "", "test.db")));
  const auto tables = Find(root, "table", "sortable");
  ASSERT_EQ(tables.size(), 1u);
  const auto rows = Find(*tables[0], "tr");
  ASSERT_EQ(rows.size(), 4u);  // header and three problems
  for (const XmlElement* a : Find(*tables[0], "a")) {
    const std::string href = a->Attribute("href");
    ASSERT_EQ(href[0], '#');
    EXPECT_NE(testing::FindId(root, href.substr(1)), nullptr) << href;
  }
  EXPECT_EQ(Find(*tables[0], "a").size(), 3u);
}

TEST(TuningReportHtml, EscapesWhatTheStoreHoldsAndShowsTheEnvironment) {
  std::unique_ptr<Store> store = FilledStore();
  const std::string html = TuningReportHtml(*ReadTuningReport(*store, "", "test.db"));
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  const XmlElement root = ParseXmlPage(html);
  EXPECT_EQ(Find(root, "script").size(), 1u);
  std::string env_text;
  for (const XmlElement* t : Find(root, "table", "env")) env_text += t->AllText();
  EXPECT_NE(env_text.find(testing::kHostileHost), std::string::npos);
  EXPECT_NE(env_text.find("0123456789ab"), std::string::npos);
  EXPECT_NE(env_text.find("driver 580.95, CUDA 13.0"), std::string::npos);
  EXPECT_NE(env_text.find("1980 MHz"), std::string::npos);
  std::string clocks;
  for (const XmlElement* p : Find(root, "p", "clocks")) clocks += p->text;
  EXPECT_NE(clocks.find("1755 MHz"), std::string::npos);
}

TEST(TuningReportHtml, IsTheSameBytesForTheSameData) {
  std::unique_ptr<Store> store = FilledStore();
  const std::string first = TuningReportHtml(*ReadTuningReport(*store, "", "test.db"));
  testing::WritePageIfAsked("tuning.html", first);
  const std::string second = TuningReportHtml(*ReadTuningReport(*store, "", "test.db"));
  EXPECT_EQ(first, second);
}

TEST(TuningReportHtml, AnEmptyStoreSaysSo) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
  ASSERT_TRUE(store.ok());
  const XmlElement root = ParseXmlPage(TuningReportHtml(*ReadTuningReport(**store, "", "empty.db")));
  ASSERT_EQ(Find(root, "p", "empty").size(), 1u);
  EXPECT_TRUE(Find(root, "table", "sortable").empty());
}

TEST(TuningReportHtml, AnE4m3CacheShowsTheErrorAgainstTheUnquantisedReferenceBesideTheKernelsError) {
  std::unique_ptr<Store> store = FilledStore();
  const std::string e4m3 = std::string(testing::kDecodeKey) + "/kve4m3";
  const std::string pick = "fused/bm16/bs128/t128/fp16/st2/sk8";
  const int64_t run = testing::BeginFinishedRun(*store, testing::H200(), "0123456789ab");
  Trial screen = testing::MakeTrial(run, e4m3, pick, TrialOutcome::kOk, 80.0);
  screen.checked_elements = 4096;
  screen.max_rel_error = 2e-3;
  screen.unquantised_rel_error = 2.1e-2;
  Trial final_round = testing::MakeTrial(run, e4m3, pick, TrialOutcome::kOk, 79.0, TrialStage::kFinal);
  Trial other = testing::MakeTrial(run, e4m3, "fused/bm16/bs64/t128/fp16/st2/sk8", TrialOutcome::kOk, 90.0);
  other.checked_elements = 4096;
  other.unquantised_rel_error = 0.5;  // not the pick's
  ASSERT_TRUE(store->RecordTrials({screen, final_round, other}).ok());
  const BestConfig best = testing::Pick(testing::H200(), run, e4m3, pick, 79.0, "0123456789ab");
  ASSERT_TRUE(store->UpsertBestConfig(best).ok());

  absl::StatusOr<std::optional<double>> read = PickUnquantisedRelError(*store, best);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, std::optional<double>(2.1e-2)) << "the verified trials of the pick only";
  BestConfig plain = best;
  plain.problem_key = testing::kDecodeKey;
  EXPECT_FALSE(PickUnquantisedRelError(*store, plain)->has_value());
  EXPECT_TRUE(IsE4m3ProblemKey(e4m3));
  EXPECT_TRUE(IsE4m3ProblemKey("decode/b1/hq8/hkv8/q1/k64/d64/causal0/fp16/scale0.5/kve4m3"));
  EXPECT_FALSE(IsE4m3ProblemKey(testing::kDecodeKey));

  const XmlElement root = ParseXmlPage(TuningReportHtml(*ReadTuningReport(*store, "", "test.db")));
  const XmlElement* section = ProblemSection(root, e4m3);
  ASSERT_NE(section, nullptr);
  const std::vector<const XmlElement*> unquantised = Find(*section, "dd", "unquantised");
  ASSERT_EQ(unquantised.size(), 1u);
  EXPECT_NE(unquantised[0]->text.find("relative 2.10e-02"), std::string::npos) << unquantised[0]->text;
  EXPECT_TRUE(Find(*ProblemSection(root, testing::kDecodeKey), "dd", "unquantised").empty());
}

}  // namespace
}  // namespace fusetune::report
