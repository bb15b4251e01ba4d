#include "tokenizer/tokenizer.h"

#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::tokenizer {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::finish_load() {
  special_.resize(id_to_token_.size(), false);
  for (const auto& t : added_.tokens()) special_[t.id] = t.special;
  vocab_size_ = static_cast<int32_t>(id_to_token_.size());
  piece_bytes_.resize(id_to_token_.size());
  for (size_t id = 0; id < id_to_token_.size(); ++id)
    if (!id_to_token_[id].empty()) piece_bytes_[id] = decoder_->apply(id_to_token_[id], 1);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const auto& t : added_.tokens())
    if (t.content == token) return t.id;
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::token_string(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return id_to_token_[id];
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size_ && special_[id]; }

std::string Tokenizer::token_bytes(int32_t id, size_t index) const {
  if (id < 0 || id >= vocab_size_ || id_to_token_[id].empty())
    fail("token id {} is not in this tokenizer's vocabulary (ids 0..{} that have a token)", id, vocab_size_ - 1);
  if (index == 1) return piece_bytes_[id];
  return decoder_->apply(id_to_token_[id], index);
}

// ---- encoding ----

void Tokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  if (kind_ == Kind::Tiktoken || ignore_merges_) {
    auto it = vocab_.find(piece);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> sym;
  sym.reserve(piece.size());
  if (kind_ == Kind::Tiktoken) {
    for (unsigned char c : piece) sym.push_back(byte_fallback_ids_[c]);
  } else {
    std::string key;
    bool last_unk = false;
    for (size_t i = 0; i < piece.size();) {
      size_t len = utf8_char_len(piece, i);
      if (len == 0) len = 1;
      key.clear();
      if (i > 0) key += subword_prefix_;
      key.append(piece, i, len);
      if (i + len == piece.size()) key += word_suffix_;
      auto it = vocab_.find(key);
      if (it != vocab_.end()) {
        sym.push_back(it->second);
        last_unk = false;
      } else if (byte_fallback_) {
        for (size_t k = 0; k < len; ++k) sym.push_back(byte_fallback_ids_[static_cast<unsigned char>(piece[i + k])]);
        last_unk = false;
      } else if (unk_) {
        if (!(fuse_unk_ && last_unk)) sym.push_back(*unk_);
        last_unk = true;
      }
      i += len;
    }
  }
  merges_.merge(sym);
  out.insert(out.end(), sym.begin(), sym.end());
}

void Tokenizer::encode_piece_cached(const std::string& piece, std::vector<int32_t>& out, PieceCache& cache) const {
  // Words repeat a lot in real text; merging each distinct piece once per
  // encode() call is most of the work saved. Long pieces are not kept.
  if (piece.size() > 64) {
    encode_piece(piece, out);
    return;
  }
  auto it = cache.find(piece);
  if (it != cache.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  size_t before = out.size();
  encode_piece(piece, out);
  cache.emplace(piece, std::vector<int32_t>(out.begin() + static_cast<ptrdiff_t>(before), out.end()));
}

void Tokenizer::encode_segment(std::string_view text, bool first_segment, bool parse_special,
                               std::vector<int32_t>& out, PieceCache& cache) const {
  std::string norm = normalizer_->identity() ? std::string(text) : normalizer_->apply(std::string(text));
  std::vector<std::string> pieces;
  auto run = [&](std::string_view t, bool first) {
    pieces.clear();
    pre_->apply(t, first, pieces);
    for (const auto& p : pieces) encode_piece_cached(p, out, cache);
  };
  if (!added_.has(true)) {
    run(norm, first_segment);
    return;
  }
  bool first = first_segment;
  for (const auto& seg : added_.split(norm, true, parse_special)) {
    if (seg.id >= 0) out.push_back(seg.id);
    else run(std::string_view(norm).substr(seg.begin, seg.end - seg.begin), first);
    first = false;
  }
}

namespace {
// Python's str.isspace() for one code point.
bool py_isspace(uint32_t c) { return is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

// tokenization_kimi.py's encode(): the text is cut into 400,000-character
// chunks, and each chunk wherever a run of only-space or only-non-space
// characters exceeds 25,000; the pieces are encoded one by one.
std::vector<std::string_view> kimi_chunks(std::string_view s) {
  constexpr size_t kMaxChars = 400000, kMaxRun = 25000;
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    // One 400k-character chunk [i, end).
    size_t end = i, chars = 0;
    while (end < s.size() && chars < kMaxChars) {
      size_t n;
      code_point_at(s, end, n);
      end += n;
      ++chars;
    }
    size_t start = i, run = 0;
    bool run_space = false;
    for (size_t k = i; k < end;) {
      size_t n;
      bool sp = py_isspace(code_point_at(s, k, n));
      if (k == i) run_space = sp;
      if (sp != run_space) {
        run = 1;
        run_space = sp;
      } else if (++run > kMaxRun) {
        out.push_back(s.substr(start, k - start));
        start = k;
        run = 1;
      }
      k += n;
    }
    out.push_back(s.substr(start, end - start));
    i = end;
  }
  return out;
}
}  // namespace

std::vector<int32_t> Tokenizer::encode_with_specials(std::string_view text) const {
  std::vector<int32_t> out = post_prefix_;
  const std::vector<int32_t> body = encode(text);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), post_suffix_.begin(), post_suffix_.end());
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::string clean;
  if (!utf8_valid(text)) {
    clean = utf8_lossy(text);
    text = clean;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  PieceCache cache;
  if (kind_ == Kind::Tiktoken && text.size() > 25000) {
    for (std::string_view chunk : kimi_chunks(text)) encode_chunk(chunk, parse_special, out, cache);
    return out;
  }
  encode_chunk(text, parse_special, out, cache);
  return out;
}

void Tokenizer::encode_chunk(std::string_view text, bool parse_special, std::vector<int32_t>& out,
                             PieceCache& cache) const {
  if (!added_.has(false)) {
    encode_segment(text, true, parse_special, out, cache);
    return;
  }
  bool first = true;
  for (const auto& seg : added_.split(text, false, parse_special)) {
    if (seg.id >= 0) out.push_back(seg.id);
    else encode_segment(text.substr(seg.begin, seg.end - seg.begin), first, parse_special, out, cache);
    first = false;
  }
}

// ---- decoding ----

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  size_t index = 0;
  for (int32_t id : ids) {
    if (skip_special && is_special(id)) continue;
    bytes += token_bytes(id, index++);
  }
  return utf8_lossy(bytes);
}

std::string Tokenizer::StreamDecoder::next(int32_t id) {
  if (skip_special_ && t_.is_special(id)) return {};
  pending_ += t_.token_bytes(id, index_++);
  size_t n = utf8_stable_prefix(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string Tokenizer::StreamDecoder::finish() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace deltafin::tokenizer
