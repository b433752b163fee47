// HellaSwag's two file formats (data/hellaswag.h): llm.c's binary eval file read back as written,
// JSON Lines encoded as llm.c encodes them, the answer a model picks, and one line of error for
// every broken file: a wrong magic or version, every truncation, more than 4 endings, a label
// outside the endings, an empty context or ending, bytes after the last example. Labels written as
// strings of digits (the Hugging Face copy) are read; an example too long for the model gets
// advice the model accepts; an evaluation alone reports its progress.
//
// Inputs, from the environment (ctest sets them): GPT_DATA_DIR (gpt2/), GPT_TEST_OUT (scratch).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cpu/reference_stage.h"
#include "data/hellaswag.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "model/params.h"
#include "testing/reference_case.h"
#include "train/eval_hellaswag.h"
#include "train/options.h"
#include "util/error.h"
#include "util/file.h"

namespace fs = std::filesystem;

namespace gpt {
namespace {

std::string env(const char* name) { return test::ctest_dir(name); }

std::string scratch_path(const std::string& name) {
    const fs::path dir = fs::path(env("GPT_TEST_OUT")) / "test_hellaswag";
    fs::create_directories(dir);
    return (dir / name).string();
}

std::string write(const std::string& name, const std::string& content) {
    const std::string path = scratch_path(name);
    std::ofstream(path, std::ios::binary) << content;
    return path;
}

std::vector<EvalExample> examples() {
    std::vector<EvalExample> e(3);
    e[0].label = 2;
    e[0].context = {464, 3290, 1110};
    e[0].endings = {{257}, {262, 3797}, {50256, 11, 13}, {1}};
    e[1].label = 0;
    e[1].context = {0};
    e[1].endings = {{5, 6, 7, 8, 9}, {10}};  // fewer than 4 endings
    e[2].label = 3;
    e[2].context = std::vector<int>(300, 42);
    e[2].endings = {{1}, {2}, {3}, {4, 4}};
    return e;
}

// The message of the error load_hellaswag throws, or "" if it throws none.
std::string error_of(const std::string& path, const Tokenizer* tokenizer = nullptr) {
    try {
        load_hellaswag(path, tokenizer);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(HellaSwag, BinaryFileReadsBackAsWritten) {
    const std::string path = scratch_path("three.bin");
    write_hellaswag_bin(path, examples());
    const std::vector<EvalExample> back = load_hellaswag(path, nullptr);
    ASSERT_EQ(back.size(), 3u);
    for (size_t i = 0; i < back.size(); ++i) {
        EXPECT_EQ(back[i].label, examples()[i].label);
        EXPECT_EQ(back[i].context, examples()[i].context);
        EXPECT_EQ(back[i].endings, examples()[i].endings);
        EXPECT_EQ(back[i].line, int64_t(i) + 1);
    }
    EXPECT_EQ(back[2].longest_row(), 302);
    // The header llm.c reads: magic, version, examples, the longest example in bytes.
    const std::string data = read_regular_file(path, "eval file");
    int32_t header[4];
    std::memcpy(header, data.data(), sizeof(header));
    EXPECT_EQ(header[0], 20240522);
    EXPECT_EQ(header[1], 1);
    EXPECT_EQ(header[2], 3);
    EXPECT_EQ(header[3], 2 * (6 + 300 + 4 + 1 + 1 + 1 + 2));
}

// Every prefix of a good file is refused with a one-line gpt::Error (never a crash, never
// examples made up), and so is every byte added after it.
TEST(HellaSwag, EveryTruncationIsRefused) {
    const std::string path = scratch_path("whole.bin");
    write_hellaswag_bin(path, examples());
    const std::string data = read_regular_file(path, "eval file");
    for (size_t n = 0; n < data.size(); n += (n < 1100 ? 1 : 3)) {
        const std::string message = error_of(write("cut.bin", data.substr(0, n)));
        EXPECT_FALSE(message.empty()) << "a file cut to " << n << " of " << data.size() << " bytes was accepted";
        EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
    EXPECT_NE(error_of(write("cut.bin", data.substr(0, 1000))).find("truncated"), std::string::npos);
    EXPECT_NE(error_of(write("long.bin", data + std::string(2, '\0'))).find("bytes after the last"), std::string::npos);
}

// One byte-level fault at a time, each named.
TEST(HellaSwag, BrokenBinaryFilesAreNamed) {
    const std::string path = scratch_path("good.bin");
    write_hellaswag_bin(path, examples());
    const std::string good = read_regular_file(path, "eval file");
    auto with = [&](size_t offset, uint16_t value) {
        std::string d = good;
        std::memcpy(&d[offset], &value, 2);
        return error_of(write("bad.bin", d));
    };
    std::string d = good;
    d[0] = 0;
    EXPECT_NE(error_of(write("bad.bin", d)).find("bad magic 20240384, expected 20240522"), std::string::npos);
    d = good;
    d[4] = 7;
    EXPECT_NE(error_of(write("bad.bin", d)).find("version 7"), std::string::npos);
    // The first example's fields: 65535, bytes, index, label, endings, context length.
    const size_t first = 1024;
    EXPECT_NE(with(first, 1).find("does not start with 65535"), std::string::npos);
    EXPECT_NE(with(first + 4, 9).find("has the index 9, expected 0"), std::string::npos);
    EXPECT_NE(with(first + 6, 4).find("has the label 4, but 4 endings"), std::string::npos);
    EXPECT_NE(with(first + 8, 5).find("has 5 endings; 1 to 4 are possible"), std::string::npos);
    EXPECT_NE(with(first + 8, 0).find("has 0 endings"), std::string::npos);
    EXPECT_NE(with(first + 10, 0).find("has an empty context"), std::string::npos);
    EXPECT_NE(with(first + 10, 500).find("its context runs past the example's end"), std::string::npos);
    // First ending's length, after the 3 context tokens: 0.
    EXPECT_NE(with(first + 12 + 6, 0).find("has an empty ending 1"), std::string::npos);
    EXPECT_EQ(error_of(write("bad.bin", "garbage")).find("HellaSwag file"), 0u);
}

const Tokenizer& tokenizer() {
    static const Tokenizer t = Tokenizer::load(env("GPT_DATA_DIR") + "/gpt2");
    return t;
}

// As llm.c and build-nanogpt render an example: the context's tokens, then " " + ending's.
TEST(HellaSwag, JsonLinesAreEncodedAsLlmcDoes) {
    const std::string path = write("two.jsonl",
                                   "{\"ind\": 4, \"ctx\": \"A man is sitting on a roof. he\", \"endings\": "
                                   "[\"is using wrap to wrap a pair of skis.\", \"starts pulling up roofing on a roof.\"], "
                                   "\"label\": 1}\n\n"
                                   "{\"ctx\": \"x\", \"endings\": [\"a\", \"b\", \"c\", \"d\"], \"label\": 3}\r\n");
    const std::vector<EvalExample> e = load_hellaswag(path, &tokenizer());
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].label, 1);
    EXPECT_EQ(e[0].context, tokenizer().encode("A man is sitting on a roof. he"));
    EXPECT_EQ(e[0].endings[1], tokenizer().encode(" starts pulling up roofing on a roof."));
    EXPECT_EQ(e[1].endings.size(), 4u);
    EXPECT_EQ(e[1].line, 3);
    EXPECT_EQ(e[1].endings[3], tokenizer().encode(" d"));
}

TEST(HellaSwag, BrokenJsonLinesAreNamed) {
    const std::string ok = "{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0}\n";
    auto bad = [&](const std::string& line) { return error_of(write("bad.jsonl", ok + line + "\n"), &tokenizer()); };
    const std::string at = scratch_path("bad.jsonl") + ":2: ";
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\"]}"),
              "HellaSwag file " + at + "no \"label\" (HellaSwag's lines have ctx, endings, label)");
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\", \"c\", \"d\", \"e\"], \"label\": 0}"),
              "HellaSwag file " + at + "5 endings; 1 to 4 are possible");
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 2}"),
              "HellaSwag file " + at + "\"label\" is not the index of one of its 2 endings");
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 0.5}"),
              "HellaSwag file " + at + "\"label\" is not the index of one of its 2 endings");
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": 1e20}"),
              "HellaSwag file " + at + "\"label\" is not the index of one of its 2 endings");
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": -1}"),
              "HellaSwag file " + at + "\"label\" is not the index of one of its 2 endings");
    // A string label is read only when it is a whole number in decimal digits.
    for (const char* label : {"\"2\"", "\"x\"", "\"1.0\"", "\" 1\"", "\"-1\"", "\"1e0\"", "\"0x1\"",
                              "\"99999999999999999999\"", "true", "null", "[0]"})
        EXPECT_EQ(bad(std::string("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": ") + label + "}"),
                  "HellaSwag file " + at + "\"label\" is not the index of one of its 2 endings")
            << label;
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": [\"a\", \"b\"], \"label\": \"\"}"),
              "HellaSwag file " + at + "\"label\" is empty (the test split has no answers: use the validation split)");
    EXPECT_EQ(bad("{\"ctx\": \"c\", \"endings\": \"a\", \"label\": 0}"),
              "HellaSwag file " + at + "\"endings\" is not a list of strings");
    EXPECT_EQ(bad("{\"ctx\": \"\", \"endings\": [\"a\"], \"label\": 0}"), "HellaSwag file " + at + "the context is empty");
    EXPECT_EQ(bad("[1]"), "HellaSwag file " + at + "not a JSON object");
    EXPECT_EQ(bad("{\"ctx\": \"c\", ").rfind("HellaSwag file " + at + "malformed JSON", 0), 0u);
    EXPECT_EQ(error_of(write("empty.jsonl", "\n \n"), &tokenizer()).find("neither llm.c's eval file"),
              std::string("HellaSwag file " + scratch_path("empty.jsonl") + ": ").size());
    EXPECT_NE(error_of(write("no_tokenizer.jsonl", ok), nullptr).find("encoded with the GPT-2 tokenizer, which was not found"), std::string::npos);
}

// The Hugging Face copy of HellaSwag writes the label as a string: "label": "1".
TEST(HellaSwag, LabelsWrittenAsDigitsAreRead) {
    for (const auto& [label, index] : std::vector<std::pair<std::string, int>>{{"1", 1}, {"03", 3}, {"0", 0}}) {
        const std::string path =
            write("string_label.jsonl",
                  "{\"ctx\": \"c\", \"endings\": [\"a\", \"b\", \"c\", \"d\"], \"label\": \"" + label + "\"}\n");
        EXPECT_EQ(load_hellaswag(path, &tokenizer()).at(0).label, index) << label;
    }
}

// An example too long for the model gets advice the model accepts (micro's context: 64
// positions): no --seq beyond the context; --eval-examples only when examples come before it.
TEST(HellaSwag, TooLongExamplesGetAdviceTheModelAccepts) {
    const GPTConfig micro = config_by_name("micro");
    TrainOptions opt = default_options(false);
    opt.tokenizer_dir = scratch_path("no_tokenizer");  // llm.c's file needs none
    opt.eval_file = scratch_path("too_long.bin");
    auto error = [&](const std::vector<EvalExample>& examples) -> std::string {
        write_hellaswag_bin(opt.eval_file, examples);
        try {
            load_eval_examples(opt, micro);
        } catch (const Error& e) {
            return e.what();
        }
        return "";
    };
    EvalExample fits;
    fits.context = {1, 2, 3};
    fits.endings = {{4}, {5}};
    EvalExample beyond = fits, within = fits;
    beyond.context.assign(70, 7);  // 71 tokens: 70 positions
    within.context.assign(40, 7);  // 41 tokens: 40 positions
    const std::string where = "--eval " + opt.eval_file + ": ";
    EXPECT_EQ(error({beyond, fits}), where + "example 1 is 71 tokens long (context and ending), longer than the "
                                             "model's context of 64 allows (65); use a model with a longer context");
    EXPECT_EQ(error({fits, within, beyond}),
              where + "example 3 is 71 tokens long (context and ending), longer than the model's context of 64 "
                      "allows (65); use a model with a longer context, or --eval-examples 2 to stop before it");
    EXPECT_EQ(error({fits, within}), "");  // alone, without --seq: the model's context
    // During training the limit is the training's --seq.
    opt.eval_every = 5;
    opt.seq = 32;
    EXPECT_EQ(error({fits, within}), where + "example 2 is 41 tokens long (context and ending), longer than --seq "
                                             "32 allows (33); use --seq 40 or more, or --eval-examples 1 to stop "
                                             "before it");
    EXPECT_EQ(error({fits, within, beyond}).find(where + "example 3 is 71 tokens long"), 0u);
}

// An evaluation alone is never silent for long: a line every 10 s (none before), with an estimate.
TEST(HellaSwag, ProgressIsALineEveryTenSeconds) {
    EvalProgress progress(10042);
    EXPECT_EQ(progress.line(40, 0.5), "");
    EXPECT_EQ(progress.line(800, 9.9), "");
    EXPECT_EQ(progress.line(1004, 10.0), "eval       1004 of 10042 examples in 10 s, about 90 s to go");
    EXPECT_EQ(progress.line(1100, 19.9), "");
    EXPECT_EQ(progress.line(2100, 20.4), "eval       2100 of 10042 examples in 20 s, about 77 s to go");
    EXPECT_EQ(progress.line(2200, 21), "");
}

TEST(HellaSwag, TheLowestMeanLossIsTheAnswer) {
    EXPECT_EQ(lowest_mean_loss({2.0, 1.5, 1.5, 3.0}), 1);  // the first of the two lowest
    EXPECT_EQ(lowest_mean_loss({0.7}), 0);
    // A NaN mean never wins; all NaN: the first.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    EXPECT_EQ(lowest_mean_loss({nan, 4.0}), 1);
    EXPECT_EQ(lowest_mean_loss({nan, nan}), 0);
}

// The evaluation's batches (train/eval_hellaswag.h) score each ending as a forward of its row
// alone would: rows of odd lengths, 3 to a batch with the last one partial, padding after each
// row; the ending's tokens are read at the right positions; a process of two scores its own
// examples only; an answer key made of the lowest means is all right.
TEST(HellaSwag, BatchedMeansAreThoseOfEachRowAlone) {
    const GPTConfig config = config_by_name("micro");
    const std::vector<float> params = init_parameters(config, 7);
    std::mt19937 rng(3);
    auto tokens = [&](size_t n) {
        std::vector<int> t(n);
        for (int& x : t) x = static_cast<int>(rng() % unsigned(config.vocab_size));
        return t;
    };
    std::vector<EvalExample> examples(5);  // 18 rows
    for (size_t i = 0; i < examples.size(); ++i) {
        examples[i].line = int64_t(i) + 1;
        examples[i].context = tokens(1 + (3 * i) % 9);
        for (size_t k = 0; k < (i == 4 ? 2u : 4u); ++k) examples[i].endings.push_back(tokens(1 + (i + k) % 4));
    }
    GPT<CpuReference> batched(config, 3, 20);
    batched.set_parameters(params);
    const std::vector<std::vector<double>> means = ending_mean_losses(batched, examples, 0, 1);

    GPT<CpuReference> single(config, 1, 20);
    single.set_parameters(params);
    for (size_t i = 0; i < examples.size(); ++i) {
        const EvalExample& e = examples[i];
        ASSERT_EQ(means[i].size(), e.endings.size());
        for (size_t k = 0; k < e.endings.size(); ++k) {
            std::vector<int> row = e.context;
            row.insert(row.end(), e.endings[k].begin(), e.endings[k].end());
            const int n = static_cast<int>(row.size()) - 1;
            single.forward(row.data(), row.data() + 1, 1, n);
            const std::vector<float> losses = single.position_losses();
            double sum = 0;
            for (size_t j = 0; j < e.endings[k].size(); ++j) sum += losses[e.context.size() - 1 + j];
            const double alone = sum / double(e.endings[k].size());
            EXPECT_NEAR(means[i][k], alone, 1e-5 * std::abs(alone)) << "example " << i << ", ending " << k;
        }
    }

    const std::vector<std::vector<double>> second = ending_mean_losses(batched, examples, 1, 2);
    for (size_t i = 0; i < examples.size(); ++i) {
        EXPECT_EQ(second[i].empty(), i % 2 == 0) << "example " << i;
        for (size_t k = 0; k < second[i].size(); ++k) EXPECT_NEAR(second[i][k], means[i][k], 1e-5 * means[i][k]);
    }

    for (size_t i = 0; i < examples.size(); ++i) examples[i].label = lowest_mean_loss(means[i]);
    // With a line every 0 s: one after each forward but the first, which completes no example.
    FILE* out = std::tmpfile();
    ASSERT_NE(out, nullptr);
    EvalProgress every_forward(examples.size(), 0, out);
    const HellaSwagResult all_right = evaluate_hellaswag(batched, examples, batched.parallel(), &every_forward);
    EXPECT_EQ(all_right.correct, 5);
    EXPECT_EQ(all_right.examples, 5);
    std::rewind(out);
    std::string printed(4096, '\0');
    printed.resize(std::fread(printed.data(), 1, printed.size(), out));
    std::fclose(out);
    EXPECT_EQ(std::count(printed.begin(), printed.end(), '\n'), 5) << printed;
    EXPECT_EQ(printed.rfind("eval       5 of 5 examples in "), printed.find_last_of('\n', printed.size() - 2) + 1)
        << printed;
}

}  // namespace
}  // namespace gpt
