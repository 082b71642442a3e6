#include "fusetune/report/html.h"

#include <set>
#include <string>

#include "fusetune/report/device_peaks.h"
#include "gtest/gtest.h"
#include "testing/xml_reader.h"

namespace fusetune::report {
namespace {

TEST(HtmlEscape, EscapesEveryCharacterThatCouldEndTextOrAnAttribute) {
  EXPECT_EQ(HtmlEscape("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&apos;");
  EXPECT_EQ(HtmlEscape("plain µs"), "plain µs");
}

TEST(AnchorId, IsReadableStableAndTellsPunctuationApart) {
  const std::string a = CellAnchor("prefill/b1/q128", "fused/bm64/bs64/t2/fp32/st1");
  EXPECT_EQ(a, CellAnchor("prefill/b1/q128", "fused/bm64/bs64/t2/fp32/st1"));
  EXPECT_EQ(a.rfind("cell-prefill-b1-q128-fused-bm64", 0), 0u) << a;
  EXPECT_EQ(a.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-"), std::string::npos) << a;
  EXPECT_NE(AnchorId("x", "a/b"), AnchorId("x", "a.b"));
}

TEST(FormatNumber, KeepsSignificantDigitsWithoutExponentsInTheUsualRange) {
  EXPECT_EQ(FormatNumber(1234.6, 3), "1235");
  EXPECT_EQ(FormatNumber(12.345, 3), "12.3");
  EXPECT_EQ(FormatNumber(0.012345, 3), "0.0123");
  EXPECT_EQ(FormatNumber(0, 3), "0.00");
  EXPECT_EQ(FormatNumber(1.0 / 0.0, 3), "-");
}

TEST(RenderPage, IsAWellFormedSelfContainedDocumentWithTheSortScript) {
  const std::string html = RenderPage({"a <title>", "made from x&y", "<p>body</p>\n"});
  testing::XmlElement root;
  std::string error;
  ASSERT_TRUE(testing::XmlReader(html).Read(&root, &error)) << error << "\n" << html;
  EXPECT_EQ(root.name, "html");
  ASSERT_EQ(testing::Find(root, "title").size(), 1u);
  EXPECT_EQ(testing::Find(root, "title")[0]->text, "a <title>");
  EXPECT_EQ(testing::Find(root, "style").size(), 1u);
  const auto scripts = testing::Find(root, "script");
  ASSERT_EQ(scripts.size(), 1u);
  EXPECT_TRUE(scripts[0]->attributes.empty()) << "inline only: no src";
  EXPECT_NE(scripts[0]->text.find("table.sortable"), std::string::npos);
  // Nothing is fetched at view time.
  EXPECT_EQ(html.find("http://"), html.find("http://www.w3.org"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(testing::Find(root, "link").size(), 0u);
}

TEST(KnownPeak, KnowsTheH200AndSaysNothingOfAnUnknownDevice) {
  std::optional<DevicePeak> h200 = KnownPeak("cuda/NVIDIA-H200/sm90", Precision::kBf16);
  ASSERT_TRUE(h200.has_value());
  EXPECT_DOUBLE_EQ(h200->tflops, 989.4);
  EXPECT_DOUBLE_EQ(h200->tbps, 4.8);
  EXPECT_NE(h200->basis.find("989.4"), std::string::npos);
  EXPECT_LT(KnownPeak("NVIDIA H200", Precision::kFp32)->tflops, 100);
  EXPECT_FALSE(KnownPeak("cpu/AMD-EPYC-7B13/x86_64-avx2", Precision::kFp32).has_value());
}

}  // namespace
}  // namespace fusetune::report
