// Text <-> token ids for a model directory, exactly as the model makers'
// tooling does it:
//   - tokenizer.json (Hugging Face tokenizers: BPE with added/special tokens,
//     normalizers, pre-tokenizers, byte-fallback, decoders), or
//   - tiktoken.model (base64 token + rank per line, as Kimi K2/K3 ship it)
//     with the split pattern and special tokens from tokenizer_config.json.
// Encoding and decoding are const and safe to call from several threads.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"

namespace deltafin::tokenizer {

class Tokenizer {
 public:
  // Loads tokenizer.json, or else tiktoken.model + tokenizer_config.json,
  // from `model_dir`. Throws Error naming the file and what is wrong.
  static std::unique_ptr<Tokenizer> load(const std::filesystem::path& model_dir);
  // From the text of a tokenizer.json; `what` names it in errors.
  static std::unique_ptr<Tokenizer> from_tokenizer_json(std::string_view json_text, std::string_view what);
  // From the text of a tiktoken.model and the parsed tokenizer_config.json
  // (its added_tokens_decoder gives the specials; an optional "pat_str" the
  // split pattern, else Kimi K2's).
  static std::unique_ptr<Tokenizer> from_tiktoken(std::string_view model_text,
                                                  const nlohmann::json& config, std::string_view what);
  ~Tokenizer();

  // Token ids of `text`. Added tokens are matched before anything else; with
  // parse_special false, special ones are encoded as plain text. Ill-formed
  // UTF-8 is read as U+FFFD (as Python's errors="replace"). tiktoken files
  // cut long texts as tokenization_kimi.py does (400,000-character chunks,
  // runs of over 25,000 space or non-space characters).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // The text of `ids` (ill-formed UTF-8 from partial byte tokens becomes
  // U+FFFD). Throws Error on an id outside [0, vocab_size()) without a token.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // encode() plus the special tokens tokenizer.json's post_processor adds
  // around a single sequence (TemplateProcessing, RobertaProcessing,
  // BertProcessing, Sequence of them), as transformers' tokenizer(text) does
  // by default (add_special_tokens=True): e.g. a BOS first.
  std::vector<int32_t> encode_with_specials(std::string_view text) const;

  // Streaming detokenizer: feed ids one at a time, get text that never ends
  // inside a UTF-8 character; concatenating every next() and finish() gives
  // decode(all ids).
  class StreamDecoder {
   public:
    explicit StreamDecoder(const Tokenizer& t, bool skip_special = false) : t_(t), skip_special_(skip_special) {}
    // Text completed by `id` (possibly empty).
    std::string next(int32_t id);
    // Whatever is still held (an unfinished character comes out as U+FFFD).
    std::string finish();

   private:
    const Tokenizer& t_;
    bool skip_special_;
    size_t index_ = 0;
    std::string pending_;
  };

  // One past the highest id of the vocabulary and the added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  // Id of the token whose string (as written in the vocabulary, or an added
  // token's content) is `token`.
  std::optional<int32_t> token_id(std::string_view token) const;
  // The token's string as written in the vocabulary (byte-level characters
  // for tokenizer.json BPE, raw bytes for tiktoken); empty when none.
  std::string token_string(int32_t id) const;
  bool is_special(int32_t id) const;
  // Bytes `id` contributes at position `index` of a decoded sequence.
  std::string token_bytes(int32_t id, size_t index = 1) const;

 private:
  Tokenizer();
  using PieceCache = std::unordered_map<std::string, std::vector<int32_t>>;
  void encode_chunk(std::string_view text, bool parse_special, std::vector<int32_t>& out, PieceCache& cache) const;
  void encode_segment(std::string_view text, bool first_segment, bool parse_special, std::vector<int32_t>& out,
                      PieceCache& cache) const;
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;
  void encode_piece_cached(const std::string& piece, std::vector<int32_t>& out, PieceCache& cache) const;
  void finish_load();

  enum class Kind { HfBpe, Tiktoken } kind_ = Kind::HfBpe;
  std::unordered_map<std::string, int32_t> vocab_;  // model vocabulary
  std::vector<std::string> id_to_token_;            // model + added, "" where none
  std::vector<bool> special_;
  BpeMerges merges_;
  AddedTokens added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<int32_t> post_prefix_, post_suffix_;  // post_processor's specials around a sequence
  std::vector<std::string> piece_bytes_;  // token_bytes(id, 1) cached
  int32_t vocab_size_ = 0;
  // HF BPE model options.
  bool byte_fallback_ = false, ignore_merges_ = false, fuse_unk_ = false;
  std::optional<int32_t> unk_;
  std::string subword_prefix_, word_suffix_;
  std::array<int32_t, 256> byte_fallback_ids_{};
};

}  // namespace deltafin::tokenizer
