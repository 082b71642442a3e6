#include "fusetune/regress/junit.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fusetune::regress {
namespace {

// The <failure> type of a failed cell, or nullptr.
const char* FailureType(const CellVerdict& v) {
  if (v.verdict == Verdict::kRegressed) return "regressed";
  if (v.accuracy.failed) return "accuracy";
  if (v.accuracy.grew) return "error-growth";
  return nullptr;
}

void AppendProperty(std::string& out, const char* name, const std::string& value) {
  absl::StrAppend(&out, "      <property name=\"", name, "\" value=\"", XmlEscape(value),
                  "\"/>\n");
}

std::string Number(double v) { return absl::StrFormat("%.6g", v); }

std::string MarkdownCell(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '|': out += "\\|"; break;
      case '`': out += "\\`"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '\n':
      case '\r': out += ' '; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += '?';
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string WriteJUnitXml(std::string_view suite_name, const std::vector<CellVerdict>& verdicts,
                          const std::vector<SuiteProperty>& suite_properties) {
  int failures = 0, skipped = 0;
  for (const CellVerdict& v : verdicts) {
    if (v.Failed()) {
      ++failures;
    } else if (v.verdict == Verdict::kUnknown) {
      ++skipped;
    }
  }
  const std::string suite = XmlEscape(suite_name);
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  absl::StrAppend(&out, "<testsuites name=\"", suite, "\" tests=\"", verdicts.size(),
                  "\" failures=\"", failures, "\" errors=\"0\" skipped=\"", skipped, "\">\n");
  absl::StrAppend(&out, "  <testsuite name=\"", suite, "\" tests=\"", verdicts.size(),
                  "\" failures=\"", failures, "\" errors=\"0\" skipped=\"", skipped, "\">\n");
  if (!suite_properties.empty()) {
    out += "    <properties>\n";
    for (const SuiteProperty& p : suite_properties) {
      absl::StrAppend(&out, "      <property name=\"", XmlEscape(p.name), "\" value=\"", XmlEscape(p.value),
                      "\"/>\n");
    }
    out += "    </properties>\n";
  }
  for (const CellVerdict& v : verdicts) {
    absl::StrAppend(&out, "    <testcase classname=\"", XmlEscape(v.problem_key), "\" name=\"",
                    XmlEscape(absl::StrCat(v.problem_key, " ", v.config_key)), "\">\n");
    out += "      <properties>\n";
    AppendProperty(out, "verdict", VerdictName(v.verdict));
    // "ratio" is the ratio the verdict, the markdown report and the stored rows give (the
    // Hodges–Lehmann ratio, centre of the interval); the ratio of the medians is another
    // statistic and says so in its name.
    AppendProperty(out, "ratio", Number(v.ratio.pairwise_ratio));
    AppendProperty(out, "ratio_of_medians", Number(v.ratio.ratio));
    AppendProperty(out, "ci_lower", Number(v.ratio.lower));
    AppendProperty(out, "ci_upper", Number(v.ratio.upper));
    AppendProperty(out, "confidence", Number(v.ratio.confidence));
    AppendProperty(out, "floor", Number(v.floor));
    AppendProperty(out, "p_slower", Number(v.p_slower));
    AppendProperty(out, "p_slower_adjusted", Number(v.p_slower_adjusted));
    AppendProperty(out, "blocks", absl::StrCat(v.baseline_blocks, "+", v.candidate_blocks));
    out += "      </properties>\n";
    if (const char* type = FailureType(v)) {
      absl::StrAppend(&out, "      <failure type=\"", type, "\" message=\"",
                      XmlEscape(absl::StrFormat("%s: ratio %.4f", type, v.ratio.pairwise_ratio)),
                      "\">", XmlEscape(v.why), "</failure>\n");
    } else if (v.verdict == Verdict::kUnknown) {
      absl::StrAppend(&out, "      <skipped message=\"", XmlEscape(v.why), "\"/>\n");
    }
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

int SeverityRank(const CellVerdict& v) {
  if (v.verdict == Verdict::kRegressed) return 0;
  if (v.accuracy.failed) return 1;
  if (v.accuracy.grew) return 2;
  switch (v.verdict) {
    case Verdict::kUnknown: return 3;
    case Verdict::kImproved: return 4;
    default: return 5;
  }
}

std::string WriteMarkdownReport(std::string_view title, const std::vector<CellVerdict>& verdicts) {
  std::vector<const CellVerdict*> sorted;
  for (const CellVerdict& v : verdicts) sorted.push_back(&v);
  std::stable_sort(sorted.begin(), sorted.end(), [](const CellVerdict* a, const CellVerdict* b) {
    const int ra = SeverityRank(*a), rb = SeverityRank(*b);
    if (ra != rb) return ra < rb;
    return a->ratio.pairwise_ratio > b->ratio.pairwise_ratio;
  });
  int counts[4] = {0, 0, 0, 0};
  int accuracy = 0;
  for (const CellVerdict& v : verdicts) {
    ++counts[static_cast<int>(v.verdict)];
    if (v.accuracy.failed || v.accuracy.grew) ++accuracy;
  }
  std::string out = absl::StrCat("# ", MarkdownCell(title), "\n\n");
  absl::StrAppend(&out, verdicts.size(), " cells: ", counts[0], " regressed, ", counts[1],
                  " improved, ", counts[2], " same, ", counts[3], " unknown; ", accuracy,
                  " with an accuracy finding.\n\n");
  out += "| verdict | problem | config | ratio | CI | floor | p (slower, adjusted) | accuracy |\n";
  out += "|---|---|---|---|---|---|---|---|\n";
  for (const CellVerdict* v : sorted) {
    std::string accuracy_text = "—";
    if (v->accuracy.failed) {
      accuracy_text = "failed";
    } else if (v->accuracy.grew) {
      accuracy_text = absl::StrFormat("error %.2fx", v->accuracy.growth);
    } else if (v->accuracy.checked) {
      accuracy_text = "ok";
    }
    absl::StrAppend(
        &out, "| ", VerdictName(v->verdict), " | ", MarkdownCell(v->problem_key), " | ",
        MarkdownCell(v->config_key), " | ", absl::StrFormat("%.4f", v->ratio.pairwise_ratio),
        " | ",
        absl::StrFormat("[%.4f, %.4f] (%.0f %%)", v->ratio.lower, v->ratio.upper,
                        100 * v->ratio.confidence),
        " | ", absl::StrFormat("%.2f %%", 100 * v->floor), " | ", absl::StrFormat("%.3g", v->p_slower_adjusted),
        " | ", accuracy_text, " |\n");
  }
  // An unknown cell is only useful with its reason (more blocks would help, or the host cannot
  // resolve the cell at all).
  std::string unknown;
  for (const CellVerdict* v : sorted) {
    if (v->verdict != Verdict::kUnknown) continue;
    absl::StrAppend(&unknown, "- ", MarkdownCell(v->problem_key), " ", MarkdownCell(v->config_key), ": ",
                    MarkdownCell(v->why), "\n");
  }
  if (!unknown.empty()) absl::StrAppend(&out, "\nWhy unknown:\n\n", unknown);
  return out;
}

}  // namespace fusetune::regress
