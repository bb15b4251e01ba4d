#include "tokenizer/pipeline.h"

#include <array>

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::tokenizer {

using nlohmann::json;

// ---- byte-level table (GPT-2 bytes_to_unicode) ----

namespace {
struct ByteTable {
  std::array<std::string, 256> to_char;
  std::array<int, 324> to_byte;  // code points used are < 324
  ByteTable() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
      utf8_append(to_char[b], cp);
      to_byte[cp] = b;
    }
  }
};
const ByteTable& table() {
  static const ByteTable t;
  return t;
}

std::string str_field(const json& j, const char* key, std::string_view what) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    fail("{}: {} {} needs a string \"{}\"", what, j.value("type", "?"), "stage", key);
  return it->get<std::string>();
}

// A Split/Replace pattern: {"String": s} (literal) or {"Regex": r}.
std::string pattern_of(const json& j, std::string_view what) {
  if (j.contains("Regex")) return j["Regex"].get<std::string>();
  if (j.contains("String")) return "\\Q" + j["String"].get<std::string>() + "\\E";
  fail("{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", what);
}


std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t k = s.find(from, pos);
    if (k == std::string::npos) break;
    out.append(s, pos, k - pos);
    out.append(to);
    pos = k + from.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}
}  // namespace

const std::string& byte_to_char(unsigned char b) { return table().to_char[b]; }
int char_to_byte(uint32_t cp) { return cp < 324 ? table().to_byte[cp] : -1; }

// ---- normalizers ----

struct Normalizer::Step {
  virtual ~Step() = default;
  virtual std::string apply(std::string s) const = 0;
};

namespace {
struct NormalForm_ : Normalizer::Step {
  NormalForm form;
  explicit NormalForm_(NormalForm f) : form(f) {}
  std::string apply(std::string s) const override { return normalize(s, form); }
};
struct Lowercase : Normalizer::Step {
  std::string apply(std::string s) const override { return to_lower(s); }
};
struct Prepend : Normalizer::Step {
  std::string prefix;
  std::string apply(std::string s) const override { return s.empty() ? s : prefix + s; }
};
struct ReplaceN : Normalizer::Step {
  std::unique_ptr<Regex> re;
  std::string content;
  std::string apply(std::string s) const override {
    std::string out;
    size_t last = 0;
    re->for_each_match(s, [&](size_t b, size_t e) {
      out.append(s, last, b - last);
      out += content;
      last = e;
    });
    out.append(s, last, std::string::npos);
    return out;
  }
};
struct StripN : Normalizer::Step {
  bool left, right;
  std::string apply(std::string s) const override {
    size_t b = 0, e = s.size(), len;
    if (left) while (b < e && is_white_space(code_point_at(s, b, len))) b += len;
    if (right) while (e > b && is_white_space(code_point_before(s, e, len))) e -= len;
    return s.substr(b, e - b);
  }
};

void parse_normalizer(const json& j, std::string_view what,
                      std::vector<std::unique_ptr<Normalizer::Step>>& steps) {
  if (j.is_null()) return;
  std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : j.at("normalizers")) parse_normalizer(s, what, steps);
  } else if (type == "NFC") {
    steps.push_back(std::make_unique<NormalForm_>(NormalForm::NFC));
  } else if (type == "NFD") {
    steps.push_back(std::make_unique<NormalForm_>(NormalForm::NFD));
  } else if (type == "NFKC") {
    steps.push_back(std::make_unique<NormalForm_>(NormalForm::NFKC));
  } else if (type == "NFKD") {
    steps.push_back(std::make_unique<NormalForm_>(NormalForm::NFKD));
  } else if (type == "Lowercase") {
    steps.push_back(std::make_unique<Lowercase>());
  } else if (type == "Prepend") {
    auto p = std::make_unique<Prepend>();
    p->prefix = str_field(j, "prepend", what);
    steps.push_back(std::move(p));
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceN>();
    r->re = std::make_unique<Regex>(pattern_of(j.at("pattern"), what), what);
    r->content = str_field(j, "content", what);
    steps.push_back(std::move(r));
  } else if (type == "Strip") {
    auto s = std::make_unique<StripN>();
    s->left = j.value("strip_left", true);
    s->right = j.value("strip_right", true);
    steps.push_back(std::move(s));
  } else {
    fail("{}: normalizer type \"{}\" is not supported (supported: NFC, NFD, NFKC, NFKD, "
         "Lowercase, Prepend, Replace, Strip, Sequence)", what, type);
  }
}
}  // namespace

Normalizer::Normalizer(const json& j, std::string_view what) { parse_normalizer(j, what, steps_); }
Normalizer::~Normalizer() = default;

std::string Normalizer::apply(std::string s) const {
  for (const auto& st : steps_) s = st->apply(std::move(s));
  return s;
}

// ---- pre-tokenizers ----

struct PreTokenizer::Step {
  virtual ~Step() = default;
  // Replaces `pieces` by its refinement.
  virtual void apply(std::vector<std::string>& pieces, bool first_segment) const = 0;
};

namespace {
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct SplitP : PreTokenizer::Step {
  std::unique_ptr<Regex> re;
  Behavior behavior = Behavior::Isolated;
  bool invert = false;
  void split_one(const std::string& s, std::vector<std::string>& out) const {
    // (begin, end, is_match) spans covering s.
    struct Span { size_t b, e; bool m; };
    std::vector<Span> spans;
    size_t last = 0;
    re->for_each_match(s, [&](size_t b, size_t e) {
      if (b > last) spans.push_back({last, b, false});
      spans.push_back({b, e, true});
      last = e;
    });
    if (last < s.size()) spans.push_back({last, s.size(), false});
    if (invert) for (auto& sp : spans) sp.m = !sp.m;
    switch (behavior) {
      case Behavior::Isolated:
        for (auto& sp : spans) out.emplace_back(s, sp.b, sp.e - sp.b);
        break;
      case Behavior::Removed:
        for (auto& sp : spans) if (!sp.m) out.emplace_back(s, sp.b, sp.e - sp.b);
        break;
      case Behavior::MergedWithPrevious: {
        bool prev_open = false;  // previous piece was a gap that a match may join
        for (auto& sp : spans) {
          if (sp.m && prev_open) out.back().append(s, sp.b, sp.e - sp.b);
          else out.emplace_back(s, sp.b, sp.e - sp.b);
          prev_open = !sp.m;
        }
        break;
      }
      case Behavior::MergedWithNext: {
        bool prev_match = false;
        for (auto& sp : spans) {
          if (!sp.m && prev_match) out.back().append(s, sp.b, sp.e - sp.b);
          else out.emplace_back(s, sp.b, sp.e - sp.b);
          prev_match = sp.m;
        }
        break;
      }
      case Behavior::Contiguous: {
        bool prev_match = false;
        for (auto& sp : spans) {
          if (sp.m && prev_match) out.back().append(s, sp.b, sp.e - sp.b);
          else out.emplace_back(s, sp.b, sp.e - sp.b);
          prev_match = sp.m;
        }
        break;
      }
    }
  }
  void apply(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces.size() * 2);
    for (const auto& p : pieces) split_one(p, out);
    pieces.swap(out);
  }
};

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct ByteLevelP : PreTokenizer::Step {
  bool add_prefix_space = false;
  std::unique_ptr<SplitP> split;  // when use_regex
  void apply(std::vector<std::string>& pieces, bool) const override {
    if (add_prefix_space)
      for (auto& p : pieces) if (!p.empty() && p[0] != ' ') p.insert(p.begin(), ' ');
    if (split) split->apply(pieces, false);
    for (auto& p : pieces) {
      std::string m;
      m.reserve(p.size() * 2);
      for (unsigned char c : p) m += byte_to_char(c);
      p.swap(m);
    }
  }
};

struct MetaspaceP : PreTokenizer::Step {
  std::string replacement = "\xE2\x96\x81";  // U+2581
  std::string scheme = "always";
  bool split = true;
  void apply(std::vector<std::string>& pieces, bool first_segment) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string p = replace_all(pieces[i], " ", replacement);
      bool prepend = scheme == "always" || (scheme == "first" && first_segment && i == 0);
      if (prepend && p.compare(0, replacement.size(), replacement) != 0) p = replacement + p;
      if (!split) { out.push_back(std::move(p)); continue; }
      // MergedWithNext on the replacement character.
      size_t start = 0;
      for (size_t k = p.find(replacement, 1); k != std::string::npos; k = p.find(replacement, k + 1)) {
        out.emplace_back(p, start, k - start);
        start = k;
      }
      if (start < p.size()) out.emplace_back(p, start, std::string::npos);
    }
    pieces.swap(out);
  }
};

Behavior parse_behavior(const json& j, std::string_view what) {
  std::string b = j.value("behavior", "Isolated");
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "Removed") return Behavior::Removed;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  fail("{}: Split behavior \"{}\" is not supported", what, b);
}

std::unique_ptr<SplitP> make_split(std::string pattern, Behavior b, bool invert, std::string_view what) {
  auto s = std::make_unique<SplitP>();
  s->re = std::make_unique<Regex>(pattern, what);
  s->behavior = b;
  s->invert = invert;
  return s;
}

void parse_pre(const json& j, std::string_view what, std::vector<std::unique_ptr<PreTokenizer::Step>>& steps) {
  if (j.is_null()) return;
  std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : j.at("pretokenizers")) parse_pre(s, what, steps);
  } else if (type == "Split") {
    steps.push_back(make_split(pattern_of(j.at("pattern"), what), parse_behavior(j, what),
                               j.value("invert", false), what));
  } else if (type == "ByteLevel") {
    auto b = std::make_unique<ByteLevelP>();
    b->add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) b->split = make_split(kGpt2Pattern, Behavior::Isolated, false, what);
    steps.push_back(std::move(b));
  } else if (type == "Digits") {
    steps.push_back(make_split(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+",
                               Behavior::Isolated, false, what));
  } else if (type == "Whitespace") {
    steps.push_back(make_split("\\w+|[^\\w\\s]+", Behavior::Removed, true, what));
  } else if (type == "WhitespaceSplit") {
    steps.push_back(make_split("\\s+", Behavior::Removed, false, what));
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceP>();
    m->replacement = j.value("replacement", m->replacement);
    if (j.contains("prepend_scheme")) m->scheme = j["prepend_scheme"].get<std::string>();
    else if (j.contains("add_prefix_space")) m->scheme = j["add_prefix_space"].get<bool>() ? "always" : "never";
    m->split = j.value("split", true);
    steps.push_back(std::move(m));
  } else {
    fail("{}: pre-tokenizer type \"{}\" is not supported (supported: Split, ByteLevel, Digits, "
         "Whitespace, WhitespaceSplit, Metaspace, Sequence)", what, type);
  }
}
}  // namespace

PreTokenizer::PreTokenizer(const json& j, std::string_view what) { parse_pre(j, what, steps_); }
PreTokenizer::PreTokenizer(std::unique_ptr<Regex> split) {
  auto s = std::make_unique<SplitP>();
  s->re = std::move(split);
  steps_.push_back(std::move(s));
}
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::apply(std::string_view text, bool first_segment, std::vector<std::string>& out) const {
  std::vector<std::string> pieces{std::string(text)};
  for (const auto& st : steps_) st->apply(pieces, first_segment);
  for (auto& p : pieces) if (!p.empty()) out.push_back(std::move(p));
}

// ---- decoders ----

struct Decoder::Step {
  virtual ~Step() = default;
  virtual std::string apply(std::string tok, size_t index) const = 0;
};

namespace {
struct ByteLevelD : Decoder::Step {
  std::string apply(std::string tok, size_t) const override {
    // A token with a character outside the table (an added token such as
    // "<｜User｜>") keeps its own bytes, as tokenizers does.
    std::string out;
    out.reserve(tok.size());
    for (size_t i = 0; i < tok.size();) {
      size_t len;
      int b = char_to_byte(code_point_at(tok, i, len));
      if (b < 0) return tok;
      out.push_back(static_cast<char>(b));
      i += len;
    }
    return out;
  }
};
struct ByteFallbackD : Decoder::Step {
  std::string apply(std::string tok, size_t) const override {
    if (tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
      auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; };
      int h = hex(tok[3]), l = hex(tok[4]);
      if (h >= 0 && l >= 0) return std::string(1, static_cast<char>(h * 16 + l));
    }
    return tok;
  }
};
struct ReplaceD : Decoder::Step {
  std::string from, to;
  std::string apply(std::string tok, size_t) const override { return replace_all(std::move(tok), from, to); }
};
struct StripD : Decoder::Step {
  std::string content;
  size_t start = 0, stop = 0;
  bool only_first = false;  // after Fuse the whole text is one token
  std::string apply(std::string tok, size_t index) const override {
    if (only_first && index != 0) return tok;
    size_t b = 0;
    for (size_t k = 0; k < start && tok.compare(b, content.size(), content) == 0; ++k) b += content.size();
    size_t e = tok.size();
    if (!only_first)
      for (size_t k = 0; k < stop && e >= b + content.size() &&
                         tok.compare(e - content.size(), content.size(), content) == 0; ++k)
        e -= content.size();
    return tok.substr(b, e - b);
  }
};
struct MetaspaceD : Decoder::Step {
  std::string replacement = "\xE2\x96\x81";
  bool strip_first = true;
  std::string apply(std::string tok, size_t index) const override {
    std::string s = replace_all(std::move(tok), replacement, " ");
    if (index == 0 && strip_first && !s.empty() && s[0] == ' ') s.erase(0, 1);
    return s;
  }
};

void parse_dec(const json& j, std::string_view what, bool& fused, bool& join_with_space,
               std::vector<std::unique_ptr<Decoder::Step>>& steps) {
  std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const auto& s : j.at("decoders")) parse_dec(s, what, fused, join_with_space, steps);
  } else if (type == "ByteLevel") {
    steps.push_back(std::make_unique<ByteLevelD>());
  } else if (type == "ByteFallback") {
    steps.push_back(std::make_unique<ByteFallbackD>());
  } else if (type == "Fuse") {
    fused = true;
  } else if (type == "Replace") {
    auto r = std::make_unique<ReplaceD>();
    const json& p = j.at("pattern");
    if (!p.contains("String")) fail("{}: decoder Replace supports only {{\"String\": ...}} patterns", what);
    r->from = p["String"].get<std::string>();
    r->to = str_field(j, "content", what);
    steps.push_back(std::move(r));
  } else if (type == "Strip") {
    auto s = std::make_unique<StripD>();
    s->content = str_field(j, "content", what);
    s->start = j.value("start", 0);
    s->stop = j.value("stop", 0);
    s->only_first = fused;
    steps.push_back(std::move(s));
  } else if (type == "Metaspace") {
    auto m = std::make_unique<MetaspaceD>();
    m->replacement = j.value("replacement", m->replacement);
    std::string scheme = j.value("prepend_scheme", j.value("add_prefix_space", true) ? "always" : "never");
    m->strip_first = scheme != "never";
    steps.push_back(std::move(m));
  } else {
    fail("{}: decoder type \"{}\" is not supported (supported: ByteLevel, ByteFallback, Fuse, "
         "Replace, Strip, Metaspace, Sequence)", what, type);
  }
}
}  // namespace

Decoder::Decoder(const json& j, std::string_view what) {
  if (j.is_null()) {
    join_with_space_ = true;
    return;
  }
  bool fused = false;
  parse_dec(j, what, fused, join_with_space_, steps_);
}
Decoder::Decoder() : raw_(true) {}
Decoder::~Decoder() = default;

std::string Decoder::apply(std::string tok, size_t index) const {
  if (raw_) return tok;
  if (join_with_space_) return index == 0 ? tok : " " + tok;
  for (const auto& st : steps_) tok = st->apply(std::move(tok), index);
  return tok;
}

}  // namespace deltafin::tokenizer
