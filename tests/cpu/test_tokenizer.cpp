// The GPT-2 tokenizer against js-tiktoken (an independent implementation of tiktoken's `gpt2`
// encoding): the same ids on the whole Brown corpus and on an edge-case text, exact round
// trips, a few hand-checked ids, and clear errors for broken vocabulary files.
//
// Inputs, from the environment (ctest sets all three):
//   GPT_DATA_DIR    gpt2/encoder.json, gpt2/vocab.bpe, brown/brown.txt   (fixture `corpus`)
//   GPT_TEST_OUT    tiktoken/brown.ids, tiktoken/edge_cases.ids          (fixture `tiktoken`)
//   GPT_SOURCE_DIR  tests/cpu/data/edge_cases.txt
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

// --- inputs --------------------------------------------------------------------------------

// The value of an environment variable, or "" (and a test failure) if it is not set.
std::string env_dir(const char* name) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
        ADD_FAILURE() << "environment variable " << name
                      << " is not set; run this test through ctest, which sets it";
        return "";
    }
    return v;
}

std::string data_dir() { return env_dir("GPT_DATA_DIR"); }
std::string vocab_dir() { return (fs::path(data_dir()) / "gpt2").string(); }
std::string corpus_path() { return (fs::path(data_dir()) / "brown" / "brown.txt").string(); }
std::string edge_path() {
    return (fs::path(env_dir("GPT_SOURCE_DIR")) / "tests" / "cpu" / "data" / "edge_cases.txt").string();
}
std::string tiktoken_ids_path(const std::string& name) {
    return (fs::path(env_dir("GPT_TEST_OUT")) / "tiktoken" / (name + ".ids")).string();
}

const char kCorpusFixture[] =
    "the `corpus` fixture (test setup_default_corpus, common/data/setup_default_corpus.cmake)";
const char kTiktokenFixture[] =
    "the `tiktoken` fixture (test tiktoken_reference_ids, tests/tools/tiktoken_ids.js)";

// Reads a whole file; on failure records which file is missing and what produces it.
bool read_bytes(const std::string& path, const char* produced_by, std::string& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        ADD_FAILURE() << "missing input " << path << " (produced by " << produced_by << ")";
        return false;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    out = ss.str();
    return true;
}

bool read_ids(const std::string& path, std::vector<int>& ids) {
    std::string bytes;
    if (!read_bytes(path, kTiktokenFixture, bytes)) return false;
    if (bytes.size() % 4 != 0) {
        ADD_FAILURE() << path << ": size " << bytes.size() << " is not a multiple of 4";
        return false;
    }
    ids.resize(bytes.size() / 4);
    for (size_t i = 0; i < ids.size(); ++i) {
        uint32_t v;
        std::memcpy(&v, bytes.data() + 4 * i, 4);  // little-endian host
        ids[i] = static_cast<int>(v);
    }
    return true;
}

// One tokenizer for the tests that only read it; loading takes a moment.
const Tokenizer* shared_tokenizer() {
    static std::unique_ptr<Tokenizer> tok;
    static bool tried = false;
    if (!tried) {
        tried = true;
        const std::string dir = vocab_dir();
        for (const char* f : {"encoder.json", "vocab.bpe"})
            if (!fs::exists(fs::path(dir) / f))
                ADD_FAILURE() << "missing input " << (fs::path(dir) / f).string() << " (produced by "
                              << kCorpusFixture << ")";
        try {
            tok = std::make_unique<Tokenizer>(Tokenizer::load(dir));
        } catch (const Error& e) {
            ADD_FAILURE() << "Tokenizer::load failed: " << e.what();
        }
    }
    return tok.get();
}

#define REQUIRE_TOKENIZER(name)                 \
    const Tokenizer* name = shared_tokenizer(); \
    if (name == nullptr) FAIL() << "no tokenizer (see the failures above)"

// --- reporting -----------------------------------------------------------------------------

// Bytes as a C-like string literal, so that white space and control bytes are visible.
std::string escaped(const std::string& s) {
    std::string out = "\"";
    for (const char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\x%02x", c);
                    out += buf;
                } else {
                    out += ch;  // UTF-8 passes through
                }
        }
    }
    return out + "\"";
}

// Ids with their decoded text, e.g. `15496 "Hello", 995 " world"`.
std::string show(const Tokenizer& tok, const std::vector<int>& ids, size_t from, size_t to) {
    std::string out;
    for (size_t i = from; i < std::min(to, ids.size()); ++i) {
        if (i > from) out += ", ";
        out += std::to_string(ids[i]);
        if (ids[i] >= 0 && ids[i] < tok.vocab_size()) out += " " + escaped(tok.decode_token(ids[i]));
    }
    return out;
}

// Equal id sequences, or a short report around the first difference.
::testing::AssertionResult same_ids(const Tokenizer& tok, const std::vector<int>& expected,
                                    const std::vector<int>& actual, const std::string& what) {
    const size_t n = std::min(expected.size(), actual.size());
    size_t i = 0;
    while (i < n && expected[i] == actual[i]) ++i;
    if (i == n && expected.size() == actual.size()) return ::testing::AssertionSuccess();

    const size_t from = i >= 8 ? i - 8 : 0;
    std::vector<int> common(expected.begin() + static_cast<std::ptrdiff_t>(from),
                            expected.begin() + static_cast<std::ptrdiff_t>(i));
    return ::testing::AssertionFailure()
           << what << ": first difference at index " << i << " (js-tiktoken has "
           << expected.size() << " ids, ours " << actual.size() << ")\n"
           << "  text before it:  " << escaped(tok.decode(common)) << "\n"
           << "  js-tiktoken [" << i << "..]: " << show(tok, expected, i, i + 8) << "\n"
           << "  ours        [" << i << "..]: " << show(tok, actual, i, i + 8);
}

// --- the vocabulary ------------------------------------------------------------------------

TEST(Tokenizer, VocabularyAndSpecialToken) {
    REQUIRE_TOKENIZER(tok);
    EXPECT_EQ(tok->vocab_size(), 50257);
    EXPECT_EQ(tok->decode_token(Tokenizer::kEndOfText), "<|endoftext|>");
    EXPECT_EQ(tok->decode_token(15496), "Hello");
    EXPECT_EQ(tok->decode_token(995), " world");
    EXPECT_EQ(tok->decode_token(198), "\n");
    EXPECT_EQ(tok->decode_token(220), " ");
    EXPECT_EQ(tok->decode_token(0), "!");  // the printable bytes come first
    EXPECT_EQ(tok->decode_token(188), std::string(1, '\0'));
    EXPECT_EQ(tok->decode_token(628), "\n\n");
    EXPECT_THROW(tok->decode_token(-1), Error);
    EXPECT_THROW(tok->decode_token(50257), Error);
    EXPECT_THROW(tok->decode({15496, 50257}), Error);
}

// --- hand-checked encodings ----------------------------------------------------------------

TEST(Tokenizer, SmallCases) {
    REQUIRE_TOKENIZER(tok);
    using V = std::vector<int>;
    EXPECT_EQ(tok->encode(""), V{});
    EXPECT_EQ(tok->encode("Hello world"), (V{15496, 995}));
    EXPECT_EQ(tok->encode("Hello, World!"), (V{15496, 11, 2159, 0}));
    EXPECT_EQ(tok->encode("it's"), (V{270, 338}));          // "it" "'s"
    EXPECT_EQ(tok->encode(" 's"), (V{705, 82}));             // " '" "s": no contraction after a space
    EXPECT_EQ(tok->encode("'S"), (V{6, 50}));                // contractions are lower case only
    EXPECT_EQ(tok->encode("1234567"), (V{10163, 2231, 3134}));  // "123" "45" "67"
    EXPECT_EQ(tok->encode("\n\n"), (V{628}));
    EXPECT_EQ(tok->encode("  hello"), (V{220, 23748}));      // " " " hello"
    EXPECT_EQ(tok->encode("hello   world"), (V{31373, 220, 220, 995}));
    EXPECT_EQ(tok->encode("  \n x"), (V{220, 220, 198, 2124}));
    EXPECT_EQ(tok->encode("a\xc2\xa0" "b"), (V{64, 1849, 65}));  // no-break space is white space
    EXPECT_EQ(tok->encode("\xc3\xa9"), (V{2634}));                // é
    EXPECT_EQ(tok->encode("\xf0\x9f\x98\x80"), (V{47249, 222}));  // 😀: two byte-level tokens
    // The special token's text is ordinary characters.
    EXPECT_EQ(tok->encode("<|endoftext|>"), (V{27, 91, 437, 1659, 5239, 91, 29}));
    // U+FEFF is white space in JavaScript (our reference) but not in tiktoken's Rust regex,
    // so " \uFEFF" is a white-space run here (" " then U+FEFF), not one " ?[^\s...]+" piece;
    // U+0085 is the other way round.
    EXPECT_EQ(tok->encode(" \xef\xbb\xbf!"), (V{220, 171, 119, 123, 0}));
    EXPECT_EQ(tok->encode(" \xc2\x85!"), (V{1587, 227, 0}));
}

// --- against js-tiktoken -------------------------------------------------------------------

TEST(Tokenizer, EdgeCasesMatchTiktoken) {
    REQUIRE_TOKENIZER(tok);
    std::string text;
    std::vector<int> expected;
    if (!read_bytes(edge_path(), "the source tree", text)) FAIL();
    if (!read_ids(tiktoken_ids_path("edge_cases"), expected)) FAIL();
    const std::vector<int> ids = tok->encode(text);
    EXPECT_TRUE(same_ids(*tok, expected, ids, "edge_cases.txt"));
    EXPECT_EQ(tok->decode(ids), text) << "decode(encode(x)) != x on edge_cases.txt";
}

TEST(Tokenizer, CorpusMatchesTiktoken) {
    std::string text;
    std::vector<int> expected;
    if (!read_bytes(corpus_path(), kCorpusFixture, text)) FAIL();
    if (!read_ids(tiktoken_ids_path("brown"), expected)) FAIL();

    // A fresh tokenizer, so the time includes filling the piece cache.
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    Tokenizer tok = Tokenizer::load(vocab_dir());
    const auto t1 = clock::now();
    const std::vector<int> ids = tok.encode(text);
    const auto t2 = clock::now();
    const double load_s = std::chrono::duration<double>(t1 - t0).count();
    const double encode_s = std::chrono::duration<double>(t2 - t1).count();
    std::printf("brown.txt: %zu bytes -> %zu tokens; load %.2f s, encode %.2f s (%.1f MB/s)\n",
                text.size(), ids.size(), load_s, encode_s, text.size() / 1e6 / encode_s);
    RecordProperty("tokens", static_cast<int>(ids.size()));
    RecordProperty("encode_ms", static_cast<int>(encode_s * 1000));

    EXPECT_TRUE(same_ids(tok, expected, ids, "brown.txt"));
    EXPECT_TRUE(tok.decode(ids) == text) << "decode(encode(x)) != x on brown.txt";
}

// --- round trips on awkward input ----------------------------------------------------------

// Malformed UTF-8 never crashes encode(); each bad byte is its own character, of the same
// class as U+FFFD (neither letter, number nor space), and is encoded as itself.
TEST(Tokenizer, InvalidUtf8RoundTrips) {
    REQUIRE_TOKENIZER(tok);
    const std::vector<std::string> cases = {
        "\xff",          "\x80",          "a\xff b",       "\xc3",          "caf\xc3",
        "\xe2\x82",      "\xe2\x82 x",    "\xc0\xaf",      "\xe0\x80\xaf",  "\xed\xa0\x80",
        "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xfe\xff", "x\x80\x80\x80y", " \xff\xfe's",
    };
    for (const std::string& s : cases) {
        const std::vector<int> ids = tok->encode(s);
        EXPECT_EQ(tok->decode(ids), s) << escaped(s);
    }
    // Piece boundaries are those of U+FFFD in its place: "a" | bad byte | " b" ...
    using V = std::vector<int>;
    const int ff = 187;  // the one-byte token for 0xff
    ASSERT_EQ(tok->decode_token(ff), "\xff");
    EXPECT_EQ(tok->encode("a\xff b"), (V{64, ff, 275}));
    // ... and " 's" after it is split as after any punctuation: " \xff'" | "s".
    EXPECT_EQ(tok->encode(" \xff's"), (V{220, ff, 6, 82}));

    std::mt19937 rng(1234);
    for (int trial = 0; trial < 2000; ++trial) {
        std::string s(rng() % 40, '\0');
        for (char& c : s) c = static_cast<char>(rng() % 256);
        ASSERT_EQ(tok->decode(tok->encode(s)), s) << escaped(s);
    }
}

// Very long pieces (one word, one number, one run of spaces) stay fast and exact.
TEST(Tokenizer, LongPieces) {
    REQUIRE_TOKENIZER(tok);
    const std::vector<std::string> cases = {
        std::string(200000, 'a'), std::string(200000, '7'), std::string(200000, ' ') + "x",
        std::string(100000, '!') + "?",
    };
    for (const std::string& s : cases) {
        const std::vector<int> ids = tok->encode(s);
        EXPECT_EQ(tok->decode(ids), s);
        EXPECT_LT(ids.size(), s.size());
    }
    // Equal pairs merge leftmost first: thirty 7s are fifteen "77" (as js-tiktoken says).
    EXPECT_EQ(tok->encode(std::string(30, '7')), std::vector<int>(15, 3324));
}

// --- load errors ---------------------------------------------------------------------------

// A scratch directory under GPT_TEST_OUT with the given vocabulary files.
std::string scratch_vocab(const std::string& name, const std::string& encoder_json,
                          const std::string& vocab_bpe) {
    const fs::path dir = fs::path(env_dir("GPT_TEST_OUT")) / "tokenizer_errors" / name;
    fs::create_directories(dir);
    std::ofstream(dir / "encoder.json", std::ios::binary) << encoder_json;
    std::ofstream(dir / "vocab.bpe", std::ios::binary) << vocab_bpe;
    return dir.string();
}

// Runs load(dir), expects gpt::Error, returns its message.
std::string load_error(const std::string& dir) {
    try {
        Tokenizer::load(dir);
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "Tokenizer::load(" << dir << ") did not throw";
    return "";
}

TEST(Tokenizer, LoadMissingDirectory) {
    const std::string dir = (fs::path(env_dir("GPT_TEST_OUT")) / "no_such_tokenizer_dir").string();
    const std::string msg = load_error(dir);
    EXPECT_NE(msg.find((fs::path(dir) / "encoder.json").string()), std::string::npos) << msg;
}

TEST(Tokenizer, LoadMalformedEncoderJson) {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"truncated", "{\"!\": 0, \"\\\"\": 1"},
        {"not_an_object", "[1, 2, 3]"},
        {"bad_escape", "{\"\\q\": 0}"},
        {"lone_surrogate", "{\"\\ud800\": 0}"},
        {"float_value", "{\"!\": 0.5}"},
        {"too_few_tokens", "{\"!\": 0}"},
    };
    for (const auto& [name, json] : bad) {
        const std::string dir = scratch_vocab("json_" + name, json, "#version: 0.2\n");
        const std::string msg = load_error(dir);
        EXPECT_NE(msg.find((fs::path(dir) / "encoder.json").string()), std::string::npos)
            << name << ": " << msg;
        EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
    }
}

TEST(Tokenizer, LoadMalformedVocabBpe) {
    std::string encoder_json;
    if (!read_bytes((fs::path(vocab_dir()) / "encoder.json").string(), kCorpusFixture, encoder_json))
        FAIL();
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"one_token", "#version: 0.2\nĠt\n"},
        {"unknown_token", "#version: 0.2\nĠ zzzzqqqq\n"},
        {"wrong_order", "#version: 0.2\nĠ a\nĠ t\n"},
        {"truncated", "#version: 0.2\nĠ t\nĠ a\n"},
        {"long_line", "#version: 0.2\n" + std::string(1 << 22, 'a') + "\n"},
        {"binary", std::string("#version: 0.2\n\0\xff\xfe \x01", 19)},
    };
    for (const auto& [name, merges] : bad) {
        const std::string dir = scratch_vocab("bpe_" + name, encoder_json, merges);
        const std::string msg = load_error(dir);
        EXPECT_NE(msg.find((fs::path(dir) / "vocab.bpe").string()), std::string::npos)
            << name << ": " << msg;
    }
}

// Rewrites JSON text with every non-ASCII character as a \uXXXX escape (a surrogate pair
// above U+FFFF) and every '/' as "\/": the same JSON value, spelled differently.
std::string escape_json_text(const std::string& json) {
    std::string out;
    for (size_t i = 0; i < json.size();) {
        const unsigned char c = static_cast<unsigned char>(json[i]);
        if (c < 0x80) {
            out += c == '/' ? std::string("\\/") : std::string(1, json[i]);
            ++i;
            continue;
        }
        const int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        uint32_t cp = c & (0x7F >> len);
        for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(json[i + k]) & 0x3F);
        i += len;
        char buf[16];
        if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04X", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
        } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
        }
        out += buf;
    }
    return out;
}

TEST(Tokenizer, LoadEncoderJsonWithEscapes) {
    REQUIRE_TOKENIZER(tok);
    std::string encoder_json, vocab_bpe;
    if (!read_bytes((fs::path(vocab_dir()) / "encoder.json").string(), kCorpusFixture, encoder_json) ||
        !read_bytes((fs::path(vocab_dir()) / "vocab.bpe").string(), kCorpusFixture, vocab_bpe))
        FAIL();

    // Same vocabulary, every key character escaped: loads and encodes the same.
    const std::string escaped_json = escape_json_text(encoder_json);
    ASSERT_NE(escaped_json, encoder_json);
    const Tokenizer copy = Tokenizer::load(scratch_vocab("escaped", escaped_json, vocab_bpe));
    const std::string sample = "Hello world, caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 it's 2024!\n";
    EXPECT_EQ(copy.encode(sample), tok->encode(sample));
    EXPECT_EQ(copy.decode_token(Tokenizer::kEndOfText), "<|endoftext|>");

    // A surrogate pair is valid JSON (U+1F600), but not a character of GPT-2's byte alphabet.
    const size_t key = encoder_json.find("\"!\"");
    ASSERT_NE(key, std::string::npos);
    std::string emoji_json = encoder_json;
    emoji_json.replace(key, 3, "\"\\ud83d\\ude00\"");
    const std::string dir = scratch_vocab("emoji_key", emoji_json, vocab_bpe);
    const std::string msg = load_error(dir);
    EXPECT_NE(msg.find((fs::path(dir) / "encoder.json").string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("alphabet"), std::string::npos) << msg;
}

}  // namespace
}  // namespace gpt
