#include "text_table.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace fusetune::cli {

size_t DisplayWidth(std::string_view text) {
  // Every byte but a UTF-8 continuation byte (10xxxxxx) starts a code point.
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

TextTable::TextTable(std::vector<TextColumn> columns) : columns_(std::move(columns)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = DisplayWidth(columns_[c].header);
    for (const std::vector<std::string>& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  std::string out;
  auto append_line = [&](auto cell_of) {
    const size_t line_start = out.size();
    for (size_t c = 0; c < columns_.size(); ++c) {
      const std::string& cell = cell_of(c);
      const size_t pad = widths[c] - DisplayWidth(cell);
      if (c > 0) out.append(kGap, ' ');
      if (columns_[c].align == TextAlign::kRight) out.append(pad, ' ');
      out += cell;
      if (columns_[c].align == TextAlign::kLeft) out.append(pad, ' ');
    }
    const size_t end = out.find_last_not_of(' ');
    out.resize(end == std::string::npos || end < line_start ? line_start : end + 1);
    out += '\n';
  };
  append_line([&](size_t c) -> const std::string& { return columns_[c].header; });
  for (const std::vector<std::string>& row : rows_) {
    append_line([&](size_t c) -> const std::string& { return row[c]; });
  }
  return out;
}

void TextTable::Print(std::FILE* out) const {
  const std::string text = Render();
  std::fwrite(text.data(), 1, text.size(), out);
}

}  // namespace fusetune::cli
