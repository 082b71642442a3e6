#include "text_table.h"

#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace fusetune::cli {
namespace {

constexpr char kLongConfig[] = "fused/bm16/bs64/t128/fp16/st2/skauto";
constexpr char kLongProblem[] = "decode/b3/hq8/hkv2/q2/k70/d64/causal0/fp32/page16/pool64/bt6/prefix2";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The display column of byte offset `byte` of `line`.
size_t ColumnOf(const std::string& line, size_t byte) { return DisplayWidth(std::string_view(line).substr(0, byte)); }

// Every left-aligned cell of every line starts where its header does, and two cells are
// separated by at least TextTable::kGap spaces.
void ExpectAligned(const std::vector<std::string>& headers, const std::vector<std::vector<std::string>>& rows,
                   const std::string& rendered) {
  const std::vector<std::string> lines = Lines(rendered);
  ASSERT_EQ(lines.size(), rows.size() + 1) << rendered;
  std::vector<size_t> starts;
  size_t header_from = 0;
  for (const std::string& h : headers) {
    const size_t at = lines[0].find(h, header_from);
    ASSERT_NE(at, std::string::npos) << h << " in " << lines[0];
    starts.push_back(ColumnOf(lines[0], at));
    header_from = at + h.size();
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string& line = lines[r + 1];
    size_t from = 0;
    for (size_t c = 0; c < headers.size(); ++c) {
      const std::string& cell = rows[r][c];
      const size_t at = line.find(cell, from);
      ASSERT_NE(at, std::string::npos) << cell << " in " << line;
      EXPECT_EQ(ColumnOf(line, at), starts[c]) << "column " << headers[c] << ", row " << r << ":\n" << rendered;
      if (c > 0) EXPECT_EQ(line.substr(at - TextTable::kGap, TextTable::kGap), std::string(TextTable::kGap, ' '));
      from = at + cell.size();
    }
  }
}

TEST(TextTable, ColumnWidthsComeFromTheLongestCellOfAnyRow) {
  const std::vector<std::string> headers = {"CREATED", "CONFIG", "PROBLEM", "DEVICE_CLASS"};
  const std::vector<std::vector<std::string>> rows = {
      {"2025-12-01 00:00:00", "fused/bm16/bs16/t1/fp32/st1", "prefill/b1/hq1/hkv1/q64/k64/d32/causal0/fp32",
       "cpu/Test-CPU/x86_64"},
      {"2025-12-01 00:00:01", kLongConfig, kLongProblem, "cuda/NVIDIA-H200/sm90"},
      {"2025-12-01 00:00:02", "f", "p", "c"},
  };
  TextTable table({{headers[0]}, {headers[1]}, {headers[2]}, {headers[3]}});
  for (const auto& row : rows) table.AddRow(row);
  EXPECT_EQ(table.row_count(), 3u);
  const std::string text = table.Render();
  ExpectAligned(headers, rows, text);
  // The longest config decides where PROBLEM starts: right after it and the gap.
  const std::vector<std::string> lines = Lines(text);
  EXPECT_EQ(lines[0].find("PROBLEM"), lines[0].find("CONFIG") + std::string(kLongConfig).size() + TextTable::kGap);
}

TEST(TextTable, NoTrailingSpacesAndShortRowsAreCompleted) {
  TextTable table({{"A"}, {"B"}, {"CHANGE"}});
  table.AddRow({"1", "two", ""});
  table.AddRow({"333"});                         // completed with empty cells
  table.AddRow({"4", "5", "<- slower", "extra"});  // the extra cell is dropped
  const std::string text = table.Render();
  for (const std::string& line : Lines(text)) {
    ASSERT_FALSE(line.empty()) << text;
    EXPECT_NE(line.back(), ' ') << "'" << line << "'";
  }
  EXPECT_EQ(text, "A    B    CHANGE\n1    two\n333\n4    5    <- slower\n");
}

TEST(TextTable, RightAlignedColumnsEndTogether) {
  TextTable table({{"ID", TextAlign::kRight}, {"MEDIAN_US", TextAlign::kRight}, {"KEY"}});
  table.AddRow({"7", "1.250", kLongConfig});
  table.AddRow({"12345", "100000.125", "k"});
  const std::vector<std::string> lines = Lines(table.Render());
  ASSERT_EQ(lines.size(), 3u);
  // Each right-aligned column ends at the same offset on every line; KEY starts together.
  EXPECT_EQ(lines[0].find("ID") + 2, lines[1].find('7') + 1);
  EXPECT_EQ(lines[0].find("ID") + 2, lines[2].find("12345") + 5);
  EXPECT_EQ(lines[0].find("MEDIAN_US") + 9, lines[1].find("1.250") + 5);
  EXPECT_EQ(lines[0].find("MEDIAN_US") + 9, lines[2].find("100000.125") + 10);
  EXPECT_EQ(lines[0].find("KEY"), lines[1].find(kLongConfig));
  EXPECT_EQ(lines[0].find("KEY"), lines[2].find(" k") + 1);
}

TEST(TextTable, WidthsCountCharactersNotBytes) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("12.5 \xC2\xB5s"), 7u);  // "12.5 µs": µ is two bytes
  TextTable table({{"TIME"}, {"NEXT"}});
  table.AddRow({"12.5 \xC2\xB5s", "a"});
  table.AddRow({"1234567890", "b"});
  const std::vector<std::string> lines = Lines(table.Render());
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(ColumnOf(lines[1], lines[1].rfind('a')), ColumnOf(lines[0], lines[0].find("NEXT")));
  EXPECT_EQ(ColumnOf(lines[2], lines[2].rfind('b')), ColumnOf(lines[0], lines[0].find("NEXT")));
}

TEST(TextTable, AnEmptyTableIsItsHeader) {
  TextTable table({{"JOB", TextAlign::kRight}, {"STATE"}});
  EXPECT_EQ(table.Render(), "JOB  STATE\n");
}

}  // namespace
}  // namespace fusetune::cli
