// The corpus reader of gpt_prepare (data/corpus.h): a text cut at its safe places encodes to the
// tokens of the whole, a text file comes back whole in pieces, JSON Lines give one document a
// line, and bad JSON Lines fail with one line naming the file and the line.
//
// Inputs, from the environment (ctest sets them): GPT_DATA_DIR (gpt2/, brown/brown.txt),
// GPT_SOURCE_DIR (tests/cpu/data/edge_cases.txt), GPT_TEST_OUT (a scratch folder).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/corpus.h"
#include "data/tokenizer.h"
#include "testing/reference_case.h"
#include "util/error.h"
#include "util/file.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::string env(const char* name) { return test::ctest_dir(name); }

const Tokenizer& tokenizer() {
    static const Tokenizer t = Tokenizer::load(env("GPT_DATA_DIR") + "/gpt2");
    return t;
}

std::string scratch(const std::string& name, const std::string& content) {
    const fs::path dir = fs::path(env("GPT_TEST_OUT")) / "test_corpus";
    fs::create_directories(dir);
    const std::string path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
}

// The tokens of `text` encoded in the parts that cutting at `cuts` gives.
std::vector<int> encode_in_parts(const std::string& text, std::vector<size_t> cuts) {
    std::vector<int> ids;
    size_t at = 0;
    cuts.push_back(text.size());
    for (const size_t cut : cuts) {
        const std::vector<int> part = tokenizer().encode(std::string_view(text).substr(at, cut - at));
        ids.insert(ids.end(), part.begin(), part.end());
        at = cut;
    }
    return ids;
}

// Every safe place of `text`, in order.
std::vector<size_t> all_safe_cuts(const std::string& text) {
    std::vector<size_t> cuts;
    for (size_t end = text.size(); end > 0;) {
        const size_t cut = last_safe_cut(std::string_view(text).substr(0, end));
        if (cut == std::string::npos) break;
        cuts.insert(cuts.begin(), cut);
        end = cut;
    }
    return cuts;
}

TEST(Corpus, SafeCutsAreBeforeWhitespaceAfterACharacterThatIsNot) {
    EXPECT_EQ(last_safe_cut("ab cd"), 2u);
    EXPECT_EQ(last_safe_cut("ab\ncd e"), 5u);
    EXPECT_EQ(last_safe_cut("ab  cd"), 2u);                        // not between the two spaces
    EXPECT_EQ(last_safe_cut("\xc3\xa9 x"), 2u);                    // after é, a letter
    EXPECT_EQ(last_safe_cut("\xe3\x80\x82\nx"), 3u);               // after 。, not white space
    EXPECT_EQ(last_safe_cut("\xc2\xa0 x"), std::string::npos);     // after a non-breaking space
    EXPECT_EQ(last_safe_cut("\xe3\x80\x80\nx"), std::string::npos);  // after an ideographic space
    EXPECT_EQ(last_safe_cut("\xa0 x"), 1u);                         // after a byte that is not UTF-8
    EXPECT_EQ(last_safe_cut("a\tb"), std::string::npos);            // a tab is not a place
    EXPECT_EQ(last_safe_cut(" a"), std::string::npos);              // never at the start
    EXPECT_EQ(last_safe_cut("x y z", 3), 3u);
    EXPECT_EQ(last_safe_cut("x y z", 4), std::string::npos);
}

// Cut at every safe place at once: the real texts and random ones of the characters that make
// the pre-tokenizer's pieces (contractions, runs of spaces, tabs, newlines, non-breaking spaces,
// digits, letters of other scripts, emoji, punctuation).
TEST(Corpus, CuttingAtSafePlacesKeepsEveryToken) {
    for (const std::string& path : {env("GPT_DATA_DIR") + "/brown/brown.txt",
                                    env("GPT_SOURCE_DIR") + "/tests/cpu/data/edge_cases.txt"}) {
        std::string text = read_regular_file(path, "text");
        if (text.size() > (size_t(1) << 20)) text.resize(size_t(1) << 20);  // a megabyte is enough
        const std::vector<size_t> cuts = all_safe_cuts(text);
        EXPECT_GT(cuts.size(), 10u) << path;
        EXPECT_EQ(encode_in_parts(text, cuts), tokenizer().encode(text)) << path;
    }
    const std::vector<std::string> atoms = {"a", "Z", "word", "'s", "'ll", "'", "7", "42", " ", "  ", "   ", "\t",
                                            "\n", "\n\n", "\r\n", "\xc2\xa0", "\xe3\x80\x80", "\xc3\xa9", "\xe6\x97\xa5",
                                            "\xf0\x9f\x98\x80", ".", ",", "!?", "-", "\"", "(", "$"};
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 300; ++trial) {
        std::string text;
        const int n = std::uniform_int_distribution<int>(1, 200)(rng);
        for (int i = 0; i < n; ++i) text += atoms[rng() % atoms.size()];
        const std::vector<size_t> cuts = all_safe_cuts(text);
        ASSERT_EQ(encode_in_parts(text, cuts), tokenizer().encode(text)) << "trial " << trial << ": '" << text << "'";
    }
}

// A text file comes back whole, in pieces of about the size asked, the first starting the
// document; an empty file is one empty document.
TEST(Corpus, TextFilesComeBackWholeInPieces) {
    std::string text;
    for (int i = 0; i < 4000; ++i) text += "Line " + std::to_string(i) + ": some words, then a newline.\n";
    const std::string path = scratch("long.txt", text);
    const std::string empty = scratch("empty.txt", "");
    CorpusReader reader({{CorpusInput::kText, path}, {CorpusInput::kText, empty}}, "text", 4096);
    std::string joined;
    std::vector<int> ids;
    Piece piece;
    int pieces = 0;
    while (reader.next(piece) && piece.where == path) {
        EXPECT_EQ(piece.starts_document, pieces == 0);
        EXPECT_LE(piece.text.size(), 2u * 4096);
        joined += piece.text;
        const std::vector<int> part = tokenizer().encode(piece.text);
        ids.insert(ids.end(), part.begin(), part.end());
        ++pieces;
    }
    EXPECT_GT(pieces, 20);
    EXPECT_EQ(joined, text);
    EXPECT_EQ(ids, tokenizer().encode(text));
    EXPECT_EQ(piece.where, empty);  // the loop stopped at the empty file's one piece
    EXPECT_TRUE(piece.starts_document);
    EXPECT_EQ(piece.text, "");
    EXPECT_FALSE(reader.next(piece));
    EXPECT_EQ(reader.documents(), 2);
}

// Text without ASCII letters is cut as well: Japanese, whose lines end in 。 and a newline.
TEST(Corpus, TextWithoutAsciiIsCutToo) {
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87" + std::to_string(i % 10) + "\xe3\x80\x82\n";
    CorpusReader reader({{CorpusInput::kText, scratch("japanese.txt", text)}}, "text", 4096);
    std::string joined;
    int pieces = 0;
    for (Piece piece; reader.next(piece); ++pieces) {
        EXPECT_LE(piece.text.size(), 2u * 4096);
        joined += piece.text;
    }
    EXPECT_GE(pieces, 9);  // 40,000 bytes in pieces of about 4,096
    EXPECT_EQ(joined, text);
}

// A text with no safe place is read on until one comes, or whole.
TEST(Corpus, TextWithoutSafePlacesIsReadWhole) {
    const std::string text(10000, 'x');
    CorpusReader reader({{CorpusInput::kText, scratch("one_word.txt", text)}}, "text", 1000);
    Piece piece;
    ASSERT_TRUE(reader.next(piece));
    EXPECT_EQ(piece.text, text);
    EXPECT_FALSE(reader.next(piece));
}

TEST(Corpus, JsonLinesGiveOneDocumentPerLine) {
    const std::string path = scratch("docs.jsonl",
                                     "{\"id\": 1, \"text\": \"first\"}\n"
                                     "\n"
                                     "{\"text\": \"caf\\u00e9 \\ud83d\\ude00\\nline two\", \"meta\": {\"a\": [1, 2]}}\r\n"
                                     "   \n"
                                     "{\"text\": \"\"}\n"
                                     "{\"content\": \"x\", \"text\": \"last, no newline\"}");
    CorpusReader reader({{CorpusInput::kJsonLines, path}}, "text", 16);  // lines longer than a read
    std::vector<Piece> pieces;
    for (Piece p; reader.next(p);) pieces.push_back(p);
    ASSERT_EQ(pieces.size(), 4u);
    EXPECT_EQ(pieces[0].text, "first");
    EXPECT_EQ(pieces[1].text, "caf\xc3\xa9 \xf0\x9f\x98\x80\nline two");
    EXPECT_EQ(pieces[2].text, "");
    EXPECT_EQ(pieces[3].text, "last, no newline");
    EXPECT_EQ(pieces[1].where, path + ":3");
    for (const Piece& p : pieces) EXPECT_TRUE(p.starts_document);
    EXPECT_EQ(reader.documents(), 4);

    CorpusReader other_field({{CorpusInput::kJsonLines, path}}, "content");
    Piece p;
    EXPECT_THROW(other_field.next(p), Error);  // line 1 has no "content"
}

std::string first_error(const std::string& name, const std::string& content, const std::string& field = "text") {
    try {
        CorpusReader reader({{CorpusInput::kJsonLines, scratch(name, content)}}, field);
        for (Piece p; reader.next(p);) {
        }
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(Corpus, BadJsonLinesNameTheFileAndLine) {
    const std::string dir = env("GPT_TEST_OUT") + "/test_corpus/";
    EXPECT_EQ(first_error("a.jsonl", "{\"text\": \"ok\"}\n[1, 2]\n"),
              dir + "a.jsonl:2: not a JSON object (JSON Lines holds one per line)");
    EXPECT_EQ(first_error("b.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n"),
              dir + "b.jsonl:2: no field \"text\" (name the text's field with --text-field)");
    EXPECT_EQ(first_error("c.jsonl", "{\"text\": 12}\n"), dir + "c.jsonl:1: field \"text\" is not a string");
    const std::string malformed = first_error("d.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"unterminated}\n");
    EXPECT_EQ(malformed.rfind(dir + "d.jsonl:3: malformed JSON at byte", 0), 0u) << malformed;
    const std::string plain = first_error("e.jsonl", "just some text\n");
    EXPECT_EQ(plain.rfind(dir + "e.jsonl:1: malformed JSON", 0), 0u) << plain;
}

// gpt_prepare reads a JSON Lines file named .txt as one text document of raw JSON; this test is
// what makes it suggest --format jsonl, and only for files that open like JSON Lines.
TEST(Corpus, JsonLinesAreRecognizedByTheirStart) {
    EXPECT_TRUE(starts_like_json_lines(scratch("j1.txt", "{\"text\": \"one\"}\n{\"text\": \"two\"}\n")));
    EXPECT_TRUE(starts_like_json_lines(scratch("j2.txt", "\xEF\xBB\xBF \r\n\t{ \"id\": 3, \"text\": \"x\"}\n")));
    EXPECT_FALSE(starts_like_json_lines(scratch("j3.txt", "{\n  \"text\": \"pretty-printed JSON\"\n}\n")));
    EXPECT_FALSE(starts_like_json_lines(scratch("j4.txt", "{braces} open this text\n")));
    EXPECT_FALSE(starts_like_json_lines(scratch("j5.txt", "Plain text, {\"text\": \"later\"}\n")));
    EXPECT_FALSE(starts_like_json_lines(scratch("j6.txt", "")));
    EXPECT_FALSE(starts_like_json_lines(scratch("j7.txt", "   \n{")));
}

TEST(Corpus, MissingInputFailsBeforeReading) {
    try {
        CorpusReader reader({{CorpusInput::kText, env("GPT_TEST_OUT") + "/test_corpus/missing.txt"}}, "text");
        FAIL() << "no error for a missing input";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("missing.txt: not found"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace gpt
