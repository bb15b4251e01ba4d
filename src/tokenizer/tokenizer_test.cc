#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "tokenizer/bpe.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "util/error.h"

namespace deltafin::tokenizer {
namespace {

using nlohmann::json;

// A byte-level BPE over lowercase words: "h e l l o" merge into "hello".
json tiny_byte_level() {
  json vocab = json::object();
  int id = 0;
  for (int b = 0; b < 256; ++b) vocab[byte_to_char(static_cast<unsigned char>(b))] = id++;
  // Merges in rank order; each merged token gets the next id.
  std::vector<std::pair<std::string, std::string>> merges = {
      {"l", "l"}, {"h", "e"}, {"he", "ll"}, {"hell", "o"}, {"\xC4\xA0", "w"}, {"o", "r"}, {"\xC4\xA0w", "or"},
      {"\xC4\xA0wor", "l"}, {"\xC4\xA0worl", "d"}};
  json m = json::array();
  for (auto& [a, b] : merges) {
    vocab[a + b] = id++;
    m.push_back(a + " " + b);
  }
  json added = json::array();
  // The file's ids 300.. are not what tokenizers uses: it numbers added
  // tokens after the model's 265 ids (265, 266, ...).
  added.push_back({{"id", 300}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}});
  added.push_back({{"id", 301}, {"content", "<think>"}, {"special", false}, {"normalized", false}});
  added.push_back({{"id", 302}, {"content", "<mask>"}, {"special", true}, {"normalized", true},
                   {"lstrip", true}, {"rstrip", true}});
  added.push_back({{"id", 303}, {"content", "word"}, {"special", false}, {"normalized", false}, {"single_word", true}});
  return {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}, {"byte_fallback", false}}},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array({{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}| ?\\p{L}+|\\s+|[^\\s\\p{L}\\p{N}]+"}}},
                       {"behavior", "Isolated"}, {"invert", false}},
                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
  };
}

TEST(Tokenizer, ByteLevelBpeMergesAndAddedTokens) {
  auto t = Tokenizer::from_tokenizer_json(tiny_byte_level().dump(), "tiny");
  int hello = *t->token_id("hello"), world = *t->token_id("\xC4\xA0world");
  EXPECT_EQ(t->encode("hello world"), (std::vector<int32_t>{hello, world}));
  // Special token inside text, with and without parse_special.
  auto ids = t->encode("hello<|end|>");
  EXPECT_EQ(ids, (std::vector<int32_t>{hello, 265}));
  auto plain = t->encode("hello<|end|>", false);
  EXPECT_GT(plain.size(), 2u);
  EXPECT_EQ(t->decode(plain), "hello<|end|>");
  // Non-special added tokens stay matched when parse_special is false.
  EXPECT_EQ(t->encode("<think>", false), (std::vector<int32_t>{266}));
  EXPECT_TRUE(t->is_special(265));
  EXPECT_FALSE(t->is_special(266));
  EXPECT_EQ(t->vocab_size(), 269);
}

TEST(Tokenizer, AddedTokenStripAndSingleWordAsTokenizersDoes) {
  // Expected ids from Hugging Face tokenizers 0.23.2 (npm) on this file.
  auto t = Tokenizer::from_tokenizer_json(tiny_byte_level().dump(), "tiny");
  EXPECT_EQ(t->encode("a <mask> b"), (std::vector<int32_t>{97, 267, 98}));
  EXPECT_EQ(t->encode("x  <mask>\n\ny"), (std::vector<int32_t>{120, 267, 121}));
  EXPECT_EQ(t->encode("word words sword word."),
            (std::vector<int32_t>{268, 262, 100, 115, 32, 115, 119, 261, 100, 32, 268, 46}));
  EXPECT_EQ(t->encode("hello<|end|>world <think>"), (std::vector<int32_t>{259, 265, 119, 261, 108, 100, 32, 266}));
  // Unicode white space is stripped; letters beyond ASCII and '_' are word characters.
  EXPECT_EQ(t->encode("a\u3000<mask>\u00a0b"), (std::vector<int32_t>{97, 267, 98}));
  EXPECT_EQ(t->encode("\u2003<mask>\u2003"), (std::vector<int32_t>{267}));
  EXPECT_EQ(t->encode(" word\u00e9 \u00e9word word_x _word word"),
            (std::vector<int32_t>{262, 100, 195, 169, 32, 195, 169, 119, 261, 100, 262, 100, 95, 120, 32, 95, 119, 261,
                                  100, 32, 268}));
}

TEST(Tokenizer, RoundTripsArbitraryUtf8AndNormalizesNfc) {
  auto t = Tokenizer::from_tokenizer_json(tiny_byte_level().dump(), "tiny");
  std::string text = "日本語 😀 12345 \t\n x<|end|>y";
  EXPECT_EQ(t->decode(t->encode(text)), text);
  // "e" + combining acute becomes the composed "é" (NFC) before encoding.
  EXPECT_EQ(t->decode(t->encode("e\xCC\x81")), "\xC3\xA9");
  // Ill-formed input is read as U+FFFD.
  EXPECT_EQ(t->decode(t->encode("a\xFFz")), "a\xEF\xBF\xBDz");
}

TEST(Tokenizer, RandomTextRoundTripsAndStreamsLikeDecode) {
  auto t = Tokenizer::from_tokenizer_json(tiny_byte_level().dump(), "tiny");
  // NFC-stable pieces: ASCII, CJK, emoji, specials, whitespace runs.
  const std::vector<std::string> parts = {"a", "hello", " world", "1234", " ", "\n\n", "\t", "日本", "😀", "👍🏽",
                                          "<|end|>", "<think>", "<mask>", "word", "!?", "é", "\u3000", "_x"};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int k = static_cast<int>(rng() % 12); k >= 0; --k) text += parts[rng() % parts.size()];
    auto ids = t->encode(text);
    std::string dec = t->decode(ids);
    // <mask> strips the white space around it; everything else is lossless.
    if (text.find("<mask>") == std::string::npos) {
      EXPECT_EQ(dec, text) << trial;
    }
    Tokenizer::StreamDecoder sd(*t);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.next(id);
    streamed += sd.finish();
    EXPECT_EQ(streamed, dec) << trial;
  }
}

TEST(Tokenizer, StreamDecoderNeverSplitsACharacter) {
  auto t = Tokenizer::from_tokenizer_json(tiny_byte_level().dump(), "tiny");
  std::string text = "h😀é";
  auto ids = t->encode(text);
  ASSERT_GE(ids.size(), 4u);  // the emoji is four byte tokens here
  Tokenizer::StreamDecoder sd(*t);
  std::string all;
  for (int32_t id : ids) {
    std::string piece = sd.next(id);
    EXPECT_TRUE(utf8_valid(piece)) << piece;
    all += piece;
  }
  all += sd.finish();
  EXPECT_EQ(all, text);
  // A dangling lead byte comes out as U+FFFD at finish().
  Tokenizer::StreamDecoder sd2(*t);
  EXPECT_EQ(sd2.next(*t->token_id(byte_to_char(0xF0))), "");
  EXPECT_EQ(sd2.finish(), "\xEF\xBF\xBD");
}

TEST(Tokenizer, MetaspaceByteFallbackLikeLlama) {
  json vocab = {{"<unk>", 0}, {"\xE2\x96\x81", 1}, {"h", 2}, {"i", 3}, {"\xE2\x96\x81h", 4}, {"\xE2\x96\x81hi", 5}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 10 + b;
  json j = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"\xE2\x96\x81", "h"}), json::array({"\xE2\x96\x81h", "i"})})},
                 {"byte_fallback", true}, {"unk_token", "<unk>"}}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                                                    {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                                                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
  };
  auto t = Tokenizer::from_tokenizer_json(j.dump(), "llama-like");
  // "hi hi!" -> ▁hi ▁hi <0x21>
  EXPECT_EQ(t->encode("hi hi!"), (std::vector<int32_t>{5, 5, 10 + '!'}));
  EXPECT_EQ(t->decode(t->encode("hi hi!")), "hi hi!");
  // "é" is not in the vocabulary: two byte-fallback tokens.
  EXPECT_EQ(t->encode("\xC3\xA9"), (std::vector<int32_t>{1, 10 + 0xC3, 10 + 0xA9}));
  EXPECT_EQ(t->decode(t->encode("\xC3\xA9")), "\xC3\xA9");
}

std::string b64(const std::string& s) {
  {  // standard base64 with padding
    static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    size_t i = 0;
    for (; i + 2 < s.size(); i += 3) {
      uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8) | uint8_t(s[i + 2]);
      out += {tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], tbl[v & 63]};
    }
    if (s.size() - i == 1) {
      uint32_t v = uint8_t(s[i]) << 16;
      out += {tbl[v >> 18], tbl[(v >> 12) & 63], '=', '='};
    } else if (s.size() - i == 2) {
      uint32_t v = (uint8_t(s[i]) << 16) | (uint8_t(s[i + 1]) << 8);
      out += {tbl[v >> 18], tbl[(v >> 12) & 63], tbl[(v >> 6) & 63], '='};
    }
    return out;
  }
}

TEST(Tokenizer, TiktokenRanksSpecialsAndKimiPattern) {
  std::string model;
  for (int b = 0; b < 256; ++b) model += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  const char* extra[] = {"ll", "he", "hell", " w", "or", "ld", " wor"};
  for (int i = 0; i < 7; ++i) model += b64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  json cfg = {{"added_tokens_decoder", {{"263", {{"content", "[EOS]"}, {"special", true}}}}}};
  auto t = Tokenizer::from_tiktoken(model, cfg, "test.tiktoken");
  // "hello" -> hell + o; " world" -> " wor" + "ld"; Han runs split off.
  EXPECT_EQ(t->encode("hello world[EOS]"), (std::vector<int32_t>{258, 'o', 262, 261, 263}));
  EXPECT_EQ(t->decode(t->encode("hello 世界 world")), "hello 世界 world");
  EXPECT_EQ(*t->token_id("[EOS]"), 263);
  EXPECT_EQ(t->token_string(264), "<|reserved_token_264|>");  // the reserved range after the base ranks
  EXPECT_THROW(Tokenizer::from_tiktoken("not base64!! x\n", cfg, "bad.tiktoken"), Error);
}

TEST(Tokenizer, TiktokenCutsLongRunsAsKimiDoes) {
  std::string model;
  for (int b = 0; b < 256; ++b) model += b64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  model += b64("aa") + " 256\n";
  auto t = Tokenizer::from_tiktoken(model, json::object(), "aa.tiktoken");
  // A run of 30,001 non-space characters is cut after 25,000 of them.
  std::string text = "b" + std::string(30000, 'a');
  auto whole = t->encode(text);
  auto first = t->encode(text.substr(0, 25000)), second = t->encode(text.substr(25000));
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_EQ(whole, first);
  EXPECT_EQ(whole.size(), 15002u);  // uncut, it would be b + 15000 x "aa"
  EXPECT_EQ(t->decode(whole), text);
}

TEST(Tokenizer, ErrorsNameTheProblem) {
  try {
    Tokenizer::load("/nonexistent/model");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/model"), std::string::npos);
  }
  json j = tiny_byte_level();
  j["normalizer"] = {{"type", "BertNormalizer"}};
  try {
    Tokenizer::from_tokenizer_json(j.dump(), "x.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BertNormalizer"), std::string::npos);
  }
  auto t = Tokenizer::from_tokenizer_json(tiny_byte_level().dump(), "tiny");
  std::vector<int32_t> bad = {99999};
  EXPECT_THROW(t->decode(bad), Error);
}

TEST(Tokenizer, LoadsFromDirectory) {
  auto dir = std::filesystem::temp_directory_path() / "deltafin_tokenizer_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_byte_level().dump();
  auto t = Tokenizer::load(dir);
  EXPECT_EQ(t->decode(t->encode("hello world")), "hello world");
  std::filesystem::remove_all(dir);
}

TEST(Bpe, HeapMergeMatchesReferenceLoop) {
  std::mt19937 rng(7);
  BpeMerges m;
  // Random merges over a 6-symbol alphabet; merged ids from 100 up.
  int next = 100;
  for (int r = 0; r < 60; ++r) {
    int a = static_cast<int>(rng() % (next > 100 ? 6 + (next - 100) : 6));
    int b = static_cast<int>(rng() % (next > 100 ? 6 + (next - 100) : 6));
    auto id = [](int x) { return x < 6 ? x : 100 + (x - 6); };
    m.add(id(a), id(b), r, next++);
  }
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> s(30 + rng() % 100);
    for (auto& x : s) x = static_cast<int32_t>(rng() % 6);
    auto a = s, b = s;
    m.merge(a);
    m.merge_reference(b);
    ASSERT_EQ(a, b) << "trial " << trial;
  }
}

TEST(Unicode, StablePrefixAndLossy) {
  EXPECT_EQ(utf8_stable_prefix("ab\xE6\x97"), 2u);       // unfinished 3-byte char
  EXPECT_EQ(utf8_stable_prefix("ab\xE6\x97\xA5"), 5u);   // finished
  EXPECT_EQ(utf8_stable_prefix("ab\xFF"), 3u);           // invalid: nothing to wait for
  EXPECT_EQ(utf8_lossy("a\xE6\x97z"), "a\xEF\xBF\xBDz");  // one U+FFFD per maximal subpart
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Regex, ClassIntersectionRewriteAndMatching) {
  std::string p = rewrite_class_intersections(R"([\p{L}&&[^\p{Han}]]+|[\p{Han}]+)");
  EXPECT_EQ(p, R"((?:(?![\p{Han}])[\p{L}])+|[\p{Han}]+)");
  Regex re(p, "test");
  std::vector<std::string> got;
  std::string text = "abc中文def";
  re.for_each_match(text, [&](size_t b, size_t e) { got.push_back(text.substr(b, e - b)); });
  EXPECT_EQ(got, (std::vector<std::string>{"abc", "中文", "def"}));
  EXPECT_THROW(Regex("(unclosed", "bad pattern"), Error);
}

}  // namespace
}  // namespace deltafin::tokenizer

namespace deltafin::tokenizer {

// transformers' tokenizer("The state of the Union is") for the demo model,
// as recorded in tests/fixtures/demo_moe/reference.json: BOS first.
TEST(PostProcessor, DemoModelAddsBosLikeTransformers) {
  auto t = Tokenizer::load(std::filesystem::path(DELTAFIN_SOURCE_DIR) / "models" / "demo-moe");
  EXPECT_EQ(t->encode_with_specials("The state of the Union is"),
            (std::vector<int32_t>{0, 2590, 1163, 272, 264, 1212, 330}));
  EXPECT_EQ(t->encode("The state of the Union is"), (std::vector<int32_t>{2590, 1163, 272, 264, 1212, 330}));
}

}  // namespace deltafin::tokenizer
