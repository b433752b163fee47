// HellaSwag (Zellers et al., 2019, https://rowanzellers.com/hellaswag/): a context and four
// endings, one of them right; a model scores each ending by its average loss over the ending's
// tokens and picks the lowest, as llm.c and build-nanogpt evaluate GPT-2 (their "acc_norm").
// The examples come from either of two files (docs/formats.md, "HellaSwag"):
//   - llm.c's eval file, hellaswag_val.bin (magic 20240522), written by its dev/data/hellaswag.py;
//   - the original JSON Lines (hellaswag_val.jsonl: "ctx", "endings", "label" on each line; the
//     label a number, or a string of digits as in the Hugging Face copy), encoded here as llm.c
//     encodes them: the context, then " " + each ending.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace gpt {

class Tokenizer;

constexpr int kEvalMagic = 20240522;
constexpr int kEvalVersion = 1;
constexpr int kMaxEndings = 4;

struct EvalExample {
    int label = 0;                          // the right ending
    std::vector<int> context;               // its tokens
    std::vector<std::vector<int>> endings;  // their tokens, 1 to kMaxEndings of them
    int64_t line = 0;                       // where it is: the example's number in the file, from 1
    // Tokens of the longest row, context + ending: the model's T must hold it.
    int longest_row() const;
};

// Reads every example of PATH, llm.c's binary file or JSON Lines (told apart by their first
// bytes); `tokenizer` encodes JSON Lines (unused for a binary file, may then be null). Throws
// gpt::Error with one line naming the file (and the example) for anything it cannot use: a bad
// magic or version, a truncated example, a label outside the endings, more than 4 endings, an
// empty context or ending, a malformed line.
std::vector<EvalExample> load_hellaswag(const std::string& path, const Tokenizer* tokenizer);

// Writes examples as llm.c's eval file (tests; and to convert JSON Lines once).
void write_hellaswag_bin(const std::string& path, const std::vector<EvalExample>& examples);

// The model's answer: the ending whose tokens have the lowest mean loss (means[k], ending k's),
// the first of equal ones, as in llm.c; a NaN mean never wins (all NaN: the first ending).
int lowest_mean_loss(const std::vector<double>& means);

}  // namespace gpt
