// Writes small HellaSwag files for the trainers' tests (tests/cpu/hellaswag_eval.cmake), in both
// formats: OUT_DIR/learnable.jsonl and OUT_DIR/learnable.bin hold the same examples, whose right
// ending is how a sentence of TEXT goes on and whose wrong endings are strings of random letters,
// so that a model that has learned a little English gets them right, and one at its
// initialisation about one in four. Besides them, files each broken in one way, and the same
// examples followed by one too long for a small model (long.jsonl), and 3 of them followed by one
// too long for --seq 64 (mid.jsonl).
//
//   make_hellaswag_inputs TEXT TOKENIZER_DIR OUT_DIR [EXAMPLES]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "data/hellaswag.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file.h"
#include "util/json.h"

namespace {

std::string join(const std::vector<std::string>& words, size_t begin, size_t end) {
    std::string s;
    for (size_t i = begin; i < end; ++i) s += (i > begin ? " " : "") + words[i];
    return s;
}

std::string random_words(std::mt19937& rng, size_t count) {
    std::string s;
    for (size_t w = 0; w < count; ++w) {
        if (w) s += ' ';
        for (int c = std::uniform_int_distribution<int>(3, 8)(rng); c > 0; --c) s += char('a' + rng() % 26);
    }
    return s;
}

std::string line(const std::string& ctx, const std::vector<std::string>& endings, int label, int index) {
    std::string s = "{\"ind\": " + std::to_string(index) + ", \"activity_label\": \"Reading\", \"ctx\": " +
                    gpt::json_string(ctx) + ", \"endings\": [";
    for (size_t k = 0; k < endings.size(); ++k) s += (k ? ", " : "") + gpt::json_string(endings[k]);
    return s + "], \"label\": " + std::to_string(label) + ", \"split\": \"val\"}\n";
}

void write(const std::string& path, const std::string& content) {
    std::ofstream out(path, std::ios::binary);
    out << content;
    if (!out) throw gpt::Error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: %s TEXT TOKENIZER_DIR OUT_DIR [EXAMPLES]\n", argv[0]);
        return 2;
    }
    try {
        const std::string text = gpt::read_regular_file(argv[1], "text");
        const gpt::Tokenizer tokenizer = gpt::Tokenizer::load(argv[2]);
        const std::string dir = argv[3];
        const int count = argc == 5 ? std::atoi(argv[4]) : 64;
        std::filesystem::create_directories(dir);

        // Sentences of 14 words or more, from the text's second half (training data, in Brown).
        std::vector<std::vector<std::string>> sentences;
        std::istringstream lines(text.substr(text.size() / 2));
        std::string partial;
        std::getline(lines, partial);  // the line the middle falls in
        for (std::string l; std::getline(lines, l) && int(sentences.size()) < count;) {
            std::istringstream words(l);
            std::vector<std::string> w;
            for (std::string word; words >> word;) w.push_back(word);
            if (w.size() >= 14 && w.size() <= 40) sentences.push_back(w);
        }
        if (int(sentences.size()) < count) throw gpt::Error("too few sentences in the text");

        std::mt19937 rng(20261127);
        std::string jsonl;
        for (int i = 0; i < count; ++i) {
            const std::vector<std::string>& w = sentences[i];
            const size_t cut = 8 + rng() % 4;
            const size_t end = std::min(w.size(), cut + 6);
            const int label = static_cast<int>(rng() % 4);
            std::vector<std::string> endings;
            for (int k = 0; k < 4; ++k) endings.push_back(k == label ? join(w, cut, end) : random_words(rng, end - cut));
            jsonl += line(join(w, 0, cut), endings, label, i);
        }
        write(dir + "/learnable.jsonl", jsonl);
        const std::vector<gpt::EvalExample> examples = gpt::load_hellaswag(dir + "/learnable.jsonl", &tokenizer);
        gpt::write_hellaswag_bin(dir + "/learnable.bin", examples);

        // Broken files, one fault each.
        std::string bin = gpt::read_regular_file(dir + "/learnable.bin", "eval file");
        std::string bad = bin;
        bad[0] = 'X';
        write(dir + "/bad_magic.bin", bad);
        write(dir + "/truncated.bin", bin.substr(0, bin.size() - 7));
        write(dir + "/five_endings.jsonl", jsonl + line("A fifth ending.", {"a", "b", "c", "d", "e"}, 0, count));
        // A last example of about 1000 tokens (more than any small model's context); and one of
        // about 80 (more than the CPU trainer's default --seq 64, less than tiny's context 128)
        // after 3 examples only: rows of 80 take seconds through tiny on a CPU.
        auto repeated = [](int times) {
            std::string s;
            for (int k = 0; k < times; ++k) s += "and then it went on ";
            return s;
        };
        write(dir + "/long.jsonl", jsonl + line(repeated(200), {"x", "y", "z", "w"}, 1, count));
        size_t third_line_end = 0;
        for (int k = 0; k < 3; ++k) third_line_end = jsonl.find('\n', third_line_end) + 1;
        write(dir + "/mid.jsonl", jsonl.substr(0, third_line_end) + line(repeated(16), {"x", "y", "z", "w"}, 1, 3));
        std::printf("wrote %s/learnable.{jsonl,bin} (%d examples), bad_magic.bin, truncated.bin, "
                    "five_endings.jsonl, long.jsonl, mid.jsonl\n", dir.c_str(), count);
        return 0;
    } catch (const gpt::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
