// The plain-text tables of the commands' terminal output (`fusetune jobs`, `workers`, `audits`,
// `regressions`, `history`): each column as wide as its widest cell, header included, so the
// columns line up whatever the lengths of the keys, commits and device classes in them.
//
// Thread-compatible: a table is built and rendered by one thread.
#ifndef FUSETUNE_SERVICE_CLI_TEXT_TABLE_H_
#define FUSETUNE_SERVICE_CLI_TEXT_TABLE_H_

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace fusetune::cli {

enum class TextAlign { kLeft, kRight };

struct TextColumn {
  std::string header;
  TextAlign align = TextAlign::kLeft;  // numbers read best right-aligned
};

// The columns a terminal shows for UTF-8 `text`: its code points (the tables hold keys,
// commits, times and numbers, with no wide or combining characters).
size_t DisplayWidth(std::string_view text);

class TextTable {
 public:
  // Columns are separated by this many spaces.
  static constexpr size_t kGap = 2;

  explicit TextTable(std::vector<TextColumn> columns);

  // One cell per column; a shorter row is completed with empty cells, cells past the last
  // column are dropped.
  void AddRow(std::vector<std::string> cells);
  size_t row_count() const { return rows_.size(); }

  // The header line then one line per row, each ending in '\n', without trailing spaces.
  // Every column starts at the same offset on every line.
  std::string Render() const;
  void Print(std::FILE* out = stdout) const;

 private:
  std::vector<TextColumn> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace fusetune::cli

#endif  // FUSETUNE_SERVICE_CLI_TEXT_TABLE_H_
