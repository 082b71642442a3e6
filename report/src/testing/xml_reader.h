// A strict reader of the XML subset the report writer emits, for the report library's tests:
// elements, attributes, text, comments, an optional <?xml ...?> declaration or <!DOCTYPE html>;
// character and the five predefined entity references. Anything not well-formed (unbalanced or
// mismatched tags, a raw '<' or '&' in text or an attribute, an unknown entity, a duplicate
// attribute, bad UTF-8, control characters, content after the root) is an error. The HTML
// pages are written as well-formed XML on purpose, so that this one reader checks them all.
//
// Thread-safety: an XmlReader is used by one thread; XmlElement is a plain value.
#ifndef FUSETUNE_REPORT_SRC_TESTING_XML_READER_H_
#define FUSETUNE_REPORT_SRC_TESTING_XML_READER_H_

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"

namespace fusetune::report::testing {

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attributes;  // values unescaped
  std::string text;                               // the element's own text, unescaped
  std::vector<XmlElement> children;

  std::string Attribute(const std::string& key) const {
    auto it = attributes.find(key);
    return it == attributes.end() ? "" : it->second;
  }
  double Number(const std::string& key) const { return std::strtod(Attribute(key).c_str(), nullptr); }
  // Whether the class attribute lists `cls` among its space-separated names.
  bool HasClass(const std::string& cls) const {
    const std::string list = " " + Attribute("class") + " ";
    return list.find(" " + cls + " ") != std::string::npos;
  }
  // The text of this element and its descendants, in document order.
  std::string AllText() const {
    std::string all = text;
    for (const XmlElement& c : children) all += c.AllText();
    return all;
  }
};

inline void AppendUtf8(unsigned code, std::string* out) {
  if (code < 0x80) {
    *out += static_cast<char>(code);
  } else if (code < 0x800) {
    *out += static_cast<char>(0xC0 | (code >> 6));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    *out += static_cast<char>(0xE0 | (code >> 12));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (code >> 18));
    *out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

inline bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    if (n == 1 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;
    i += n;
  }
  return true;
}

class XmlReader {
 public:
  explicit XmlReader(std::string_view doc) : s_(doc) {}

  // The root element, or "" and *error set.
  bool Read(XmlElement* root, std::string* error) {
    if (!ValidUtf8(s_)) return Fail("not valid UTF-8 or holds control characters", error);
    if (s_.substr(0, 15) == "<!DOCTYPE html>") i_ = 15;
    if (s_.substr(0, 5) == "<?xml") {
      const size_t end = s_.find("?>");
      if (end == std::string_view::npos) return Fail("unterminated XML declaration", error);
      i_ = end + 2;
    }
    SkipMisc();
    if (!Element(root)) return Fail(error_, error);
    SkipMisc();
    if (i_ != s_.size()) return Fail("content after the root element", error);
    return true;
  }

 private:
  bool Fail(const std::string& why, std::string* error) {
    *error = fmt::format("{} (at byte {}: '{}')", why, i_, s_.substr(i_, 40));
    return false;
  }
  bool Err(const std::string& why) {
    error_ = why;
    return false;
  }
  bool Starts(std::string_view t) const { return s_.substr(i_, t.size()) == t; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void SkipMisc() {
    for (;;) {
      SkipSpace();
      if (!Starts("<!--")) return;
      const size_t end = s_.find("-->", i_ + 4);
      if (end == std::string_view::npos) return;
      i_ = end + 3;
    }
  }
  static bool NameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
  static bool NameChar(char c) {
    return NameStart(c) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-';
  }
  bool Name(std::string* name) {
    if (i_ >= s_.size() || !NameStart(s_[i_])) return Err("expected a name");
    const size_t from = i_;
    while (i_ < s_.size() && NameChar(s_[i_])) ++i_;
    *name = std::string(s_.substr(from, i_ - from));
    return true;
  }
  // Appends the unescaped `raw` (text or an attribute value) to *out.
  bool Unescape(std::string_view raw, std::string* out) {
    for (size_t k = 0; k < raw.size(); ++k) {
      if (raw[k] == '<') return Err("raw '<'");
      if (raw[k] != '&') {
        *out += raw[k];
        continue;
      }
      const size_t semi = raw.find(';', k);
      if (semi == std::string_view::npos) return Err("unterminated entity reference");
      const std::string_view ref = raw.substr(k + 1, semi - k - 1);
      static const std::map<std::string_view, char> kNamed = {
          {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
      if (auto it = kNamed.find(ref); it != kNamed.end()) {
        *out += it->second;
      } else if (ref.size() > 1 && ref[0] == '#') {
        const bool hex = ref[1] == 'x';
        const std::string digits(ref.substr(hex ? 2 : 1));
        if (digits.empty() || digits.find_first_not_of(hex ? "0123456789abcdefABCDEF" : "0123456789") !=
                                  std::string::npos) {
          return Err("bad character reference");
        }
        AppendUtf8(static_cast<unsigned>(std::strtoul(digits.c_str(), nullptr, hex ? 16 : 10)), out);
      } else {
        return Err("unknown entity &" + std::string(ref) + ";");
      }
      k = semi;
    }
    return true;
  }
  bool Element(XmlElement* e) {
    if (!Starts("<")) return Err("expected '<'");
    ++i_;
    if (!Name(&e->name)) return false;
    for (;;) {
      const size_t before = i_;
      SkipSpace();
      if (Starts("/>")) {
        i_ += 2;
        return true;
      }
      if (Starts(">")) {
        ++i_;
        break;
      }
      if (i_ == before) return Err("expected a space before an attribute");
      std::string key;
      if (!Name(&key)) return false;
      SkipSpace();
      if (!Starts("=")) return Err("expected '='");
      ++i_;
      SkipSpace();
      if (i_ >= s_.size() || (s_[i_] != '"' && s_[i_] != '\'')) return Err("expected a quoted value");
      const char quote = s_[i_++];
      const size_t end = s_.find(quote, i_);
      if (end == std::string_view::npos) return Err("unterminated attribute value");
      std::string value;
      if (!Unescape(s_.substr(i_, end - i_), &value)) return false;
      if (!e->attributes.emplace(key, value).second) return Err("duplicate attribute " + key);
      i_ = end + 1;
    }
    for (;;) {  // content
      const size_t lt = s_.find('<', i_);
      if (lt == std::string_view::npos) return Err("unterminated element " + e->name);
      const std::string_view text = s_.substr(i_, lt - i_);
      if (text.find("]]>") != std::string_view::npos) return Err("']]>' in text");
      if (!Unescape(text, &e->text)) return false;
      i_ = lt;
      if (Starts("<!--")) {
        const size_t end = s_.find("-->", i_ + 4);
        if (end == std::string_view::npos) return Err("unterminated comment");
        i_ = end + 3;
      } else if (Starts("</")) {
        i_ += 2;
        std::string name;
        if (!Name(&name)) return false;
        if (name != e->name) return Err("</" + name + "> closes <" + e->name + ">");
        SkipSpace();
        if (!Starts(">")) return Err("expected '>'");
        ++i_;
        return true;
      } else if (Starts("<!") || Starts("<?")) {
        return Err("unsupported markup");
      } else {
        e->children.emplace_back();
        if (!Element(&e->children.back())) return false;
      }
    }
  }

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

// The descendants of `e` named `name` (with class `cls` among its classes when not empty), in
// document order.
inline void Find(const XmlElement& e, const std::string& name, const std::string& cls,
                 std::vector<const XmlElement*>* out) {
  for (const XmlElement& c : e.children) {
    if (c.name == name && (cls.empty() || c.HasClass(cls))) out->push_back(&c);
    Find(c, name, cls, out);
  }
}
inline std::vector<const XmlElement*> Find(const XmlElement& e, const std::string& name, const std::string& cls = "") {
  std::vector<const XmlElement*> out;
  Find(e, name, cls, &out);
  return out;
}
// The descendant with attribute id="`id`", or nullptr.
inline const XmlElement* FindId(const XmlElement& e, const std::string& id) {
  for (const XmlElement& c : e.children) {
    if (c.Attribute("id") == id) return &c;
    if (const XmlElement* found = FindId(c, id); found != nullptr) return found;
  }
  return nullptr;
}

// The parsed page (HTML written as well-formed XML); fails the calling test when it does not parse.
inline XmlElement ParseXmlPage(const std::string& html) {
  XmlElement root;
  std::string error;
  EXPECT_TRUE(XmlReader(html).Read(&root, &error)) << error;
  return root;
}

// Writes `html` to $FUSETUNE_REPORT_PAGES_DIR/`name` when that variable is set (to look at the
// pages the tests make from their fixed databases: report/README.md); nothing otherwise.
inline void WritePageIfAsked(const std::string& name, const std::string& html) {
  const char* dir = std::getenv("FUSETUNE_REPORT_PAGES_DIR");
  if (dir == nullptr || *dir == '\0') return;
  std::ofstream(std::string(dir) + "/" + name, std::ios::binary | std::ios::trunc) << html;
}

}  // namespace fusetune::report::testing

#endif  // FUSETUNE_REPORT_SRC_TESTING_XML_READER_H_
