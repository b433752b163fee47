// GPT-2's byte-level BPE tokenizer, written to give exactly the ids of tiktoken's `gpt2`
// encoding (we test against js-tiktoken on the Brown corpus and on an edge-case text).
//
// Encoding happens in two steps:
//   1. Pre-tokenization splits the text into pieces with GPT-2's regular expression
//        '(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (contractions, words with their leading space, numbers, punctuation runs, white
//      space; js-tiktoken spells the first part 's|'t|'re|'ve|'m|'ll|'d, the same thing).
//      No token ever crosses a piece boundary.
//   2. Each piece, as UTF-8 bytes, starts as one token per byte; then the adjacent pair with
//      the lowest merge rank (earliest line of vocab.bpe) is merged, again and again, until
//      no adjacent pair is in the merge list.
//
// Both files store tokens as printable text: GPT-2 maps every byte to a visible character
// (the space byte becomes 'Ġ', newline 'Ċ', ...) so that the files stay readable. We turn
// them back into raw bytes at load time and work on bytes from then on.
#include "data/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <queue>

#include "util/error.h"
#include "util/file.h"
#include "util/json.h"
#include "util/lines.h"

namespace gpt {

namespace {

// ---------------------------------------------------------------------------------------
// Files

// GPT-2's encoder.json is about 1 MB and vocab.bpe 0.5 MB; a file many times that size is
// not a vocabulary, and is refused before it fills the memory.
constexpr size_t kMaxTokenizerFileBytes = size_t(64) << 20;

std::string read_file(const std::string& path) {
    return read_regular_file(path, "tokenizer file", kMaxTokenizerFileBytes);
}

// Text for an error message: in quotes, control characters escaped, so it stays one line.
std::string in_quotes(std::string_view text) {
    std::string out = "\"";
    for (const char ch : text) {
        const unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20 || c == 0x7F) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

// ---------------------------------------------------------------------------------------
// UTF-8 decoding and character classes

struct CodePointRange {
    char32_t first, last;
};
#include "unicode_tables.inc"  // kLetterRanges, kNumberRanges, kSpaceRanges

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

template <size_t N>
bool in_ranges(const CodePointRange (&ranges)[N], char32_t cp) {
    // The first range whose end is >= cp is the only one that can hold cp.
    const CodePointRange* it = std::lower_bound(
        ranges, ranges + N, cp, [](const CodePointRange& r, char32_t c) { return r.last < c; });
    return it != ranges + N && it->first <= cp;
}

// Most text is ASCII, where the classes are simple; the tables agree with these rules.
CharClass ascii_class(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    if (c == ' ' || (c >= '\t' && c <= '\r')) return CharClass::kSpace;  // \t \n \v \f \r
    return CharClass::kOther;
}

CharClass classify(char32_t cp) {
    if (cp < 0x80) return ascii_class(static_cast<unsigned char>(cp));
    if (in_ranges(kLetterRanges, cp)) return CharClass::kLetter;
    if (in_ranges(kNumberRanges, cp)) return CharClass::kNumber;
    if (in_ranges(kSpaceRanges, cp)) return CharClass::kSpace;
    return CharClass::kOther;
}

struct Char {
    char32_t cp;  // the code point; U+FFFD for a byte that is not valid UTF-8
    int len;      // its length in bytes (1 for an invalid byte)
    CharClass cls;
};

bool is_cont(unsigned char b) { return (b & 0xC0) == 0x80; }

// Decodes the character starting at byte `pos` (< s.size()). Only well-formed UTF-8 is
// accepted (the Unicode standard's table 3-7: no overlong forms, no surrogates, nothing
// above U+10FFFF). Any other byte is read as one character on its own, of class "other",
// as if it were U+FFFD, the replacement character that a JavaScript or Python reader puts in
// its place. So a malformed byte never crashes anything, splits the text the way js-tiktoken
// would split the same file, and is still encoded as itself, so decode(encode(x)) == x for
// any bytes x. (js-tiktoken itself would encode U+FFFD's three bytes instead.)
Char char_at(std::string_view s, size_t pos) {
    const auto byte = [&](size_t i) -> unsigned char {
        return i < s.size() ? static_cast<unsigned char>(s[i]) : 0;
    };
    const unsigned char b0 = byte(pos);
    if (b0 < 0x80) return {b0, 1, ascii_class(b0)};

    int len = 0;
    char32_t cp = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2, cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3, cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;  // else overlong
        if (b0 == 0xED) hi = 0x9F;  // else a surrogate
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4, cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;  // else overlong
        if (b0 == 0xF4) hi = 0x8F;  // else above U+10FFFF
    }
    const Char invalid{0xFFFD, 1, CharClass::kOther};
    if (len == 0) return invalid;
    const unsigned char b1 = byte(pos + 1);
    if (b1 < lo || b1 > hi) return invalid;
    cp = (cp << 6) | (b1 & 0x3F);
    for (int i = 2; i < len; ++i) {
        const unsigned char b = byte(pos + i);
        if (!is_cont(b)) return invalid;
        cp = (cp << 6) | (b & 0x3F);
    }
    return {cp, len, classify(cp)};
}

// ---------------------------------------------------------------------------------------
// Pre-tokenization: the regular expression above, by hand.
//
// The alternatives are tried in order at each position, as a backtracking regex engine
// does. Since the classes L, N, \s and "other" do not overlap, at most one of the middle
// three alternatives can match, and we can tell which by looking at one or two characters.
//
// \s is JavaScript's: js-tiktoken runs the pattern with the JavaScript engine. tiktoken
// proper (Rust) uses Unicode's White_Space property instead, which differs in two code
// points: U+0085 (NEXT LINE) is white space for Rust, not for JavaScript; U+FEFF (BYTE ORDER
// MARK / zero-width no-break space) is white space for JavaScript, not for Rust. The two can
// also disagree about letters and numbers added in a newer Unicode version than the other's.

// Returns the end (byte offset) of the piece that starts at `pos` (< s.size()).
size_t piece_end(std::string_view s, size_t pos) {
    const size_t n = s.size();
    const Char c = char_at(s, pos);

    // 's 't 're 've 'm 'll 'd (lower case only, and also inside a word: "it'sx" -> 's x).
    if (c.cp == '\'' && pos + 1 < n) {
        const char a = s[pos + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
        if (pos + 2 < n) {
            const char b = s[pos + 2];
            if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                return pos + 3;
        }
    }

    // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional ASCII space (only U+0020),
    // then a run of one class. A space followed by white space (or by nothing) falls through.
    size_t run_start = pos;
    CharClass run_class = c.cls;
    if (c.cp == ' ' && pos + 1 < n) {
        const Char next = char_at(s, pos + 1);
        if (next.cls != CharClass::kSpace) run_start = pos + 1, run_class = next.cls;
    }
    if (run_class != CharClass::kSpace) {
        size_t end = run_start;
        while (end < n) {
            const Char d = char_at(s, end);
            if (d.cls != run_class) break;
            end += d.len;
        }
        return end;
    }

    // White space. "\s+(?!\S)" takes the run but gives back its last character when a
    // non-space follows, so that " word" keeps its space; a single white-space character
    // before a non-space is matched by the final "\s+" alone.
    size_t end = pos, last = pos;
    int count = 0;
    while (end < n) {
        const Char d = char_at(s, end);
        if (d.cls != CharClass::kSpace) break;
        last = end;
        end += d.len;
        ++count;
    }
    if (end < n && count >= 2) return last;
    return end;
}


// ---------------------------------------------------------------------------------------
// GPT-2's byte <-> printable-character mapping (bytes_to_unicode() in OpenAI's encoder.py).
// The printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' stand for themselves (as code points);
// the other 68 bytes, in increasing order, become U+0100, U+0101, ... U+0143.
struct ByteAlphabet {
    int byte_of[0x144];  // code point -> byte, or -1
    ByteAlphabet() {
        std::fill(std::begin(byte_of), std::end(byte_of), -1);
        int next = 0x100;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            byte_of[printable ? b : next++] = b;
        }
    }
};

const ByteAlphabet& alphabet() {
    static const ByteAlphabet table;
    return table;
}

// Turns a token as written in the files (UTF-8 of mapped characters) into its raw bytes.
// Returns false if some character is not in the alphabet (invalid UTF-8 included: it
// decodes as U+FFFD, which is not).
bool unmap_token(std::string_view text, std::string& bytes) {
    bytes.clear();
    for (size_t i = 0; i < text.size();) {
        const Char c = char_at(text, i);
        if (c.cp >= 0x144 || alphabet().byte_of[c.cp] < 0) return false;
        bytes += static_cast<char>(alphabet().byte_of[c.cp]);
        i += c.len;
    }
    return true;
}

const char kEndOfTextText[] = "<|endoftext|>";

// Caching every distinct piece of a huge corpus would grow without bound; past this many
// entries we simply start over (real text has far fewer distinct words).
constexpr size_t kMaxCacheEntries = 1 << 18;

uint64_t pair_key(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Loading

Tokenizer Tokenizer::load(const std::string& dir) {
    namespace fs = std::filesystem;
    const std::string encoder_path = (fs::path(dir) / "encoder.json").string();
    const std::string merges_path = (fs::path(dir) / "vocab.bpe").string();
    Tokenizer tok = from_encoder_json(read_file(encoder_path), encoder_path);
    tok.read_merges(read_file(merges_path), merges_path);
    return tok;
}

// encoder.json: token text -> id. Ids must be exactly 0 .. count-1, each once.
Tokenizer Tokenizer::from_encoder_json(std::string_view text, const std::string& encoder_path) {
    Tokenizer tok;
    tok.encoder_path_ = encoder_path;
    const auto bad = [&](const std::string& what) {
        throw Error("tokenizer file " + encoder_path + ": " + what);
    };
    Json json;
    try {
        json = Json::parse(text);
    } catch (const Error& e) {
        bad(e.what());
    }
    // One flat object {"token": id, ...} with whole-number ids.
    if (json.kind != Json::Object) bad("expected one JSON object of token: id");
    if (json.object_entries != json.object.size()) bad("a token appears twice");
    std::vector<std::pair<std::string, long long>> entries;
    for (const auto& [key, value] : json.object) {
        if (value.kind != Json::Number || value.number != std::floor(value.number) || std::fabs(value.number) > 1e12)
            bad("token " + in_quotes(key) + " has an id that is not a whole number");
        entries.emplace_back(key, static_cast<long long>(value.number));
    }
    // Each entry is checked before the count, so that a small file (a test's, a fuzzer's)
    // reaches every check.
    const size_t count = static_cast<size_t>(kEndOfText) + 1;
    tok.token_bytes_.assign(count, std::string());
    std::vector<bool> seen(count, false);
    std::string bytes;
    for (const auto& [key, id] : entries) {
        if (id < 0 || id >= static_cast<long long>(count))
            bad("token " + in_quotes(key) + " has id " + std::to_string(id) + ", outside 0.." +
                std::to_string(count - 1));
        if (seen[id]) bad("id " + std::to_string(id) + " is used twice");
        seen[id] = true;
        if (id == kEndOfText) {
            // The one special token is stored as plain text, not in the byte alphabet.
            if (key != kEndOfTextText)
                bad("id " + std::to_string(kEndOfText) + " is " + in_quotes(key) + ", expected " +
                    kEndOfTextText);
            tok.token_bytes_[id] = key;
            continue;
        }
        if (!unmap_token(key, bytes) || bytes.empty())
            bad("token " + in_quotes(key) + " is not written in GPT-2's byte alphabet");
        if (!tok.bytes_to_id_.emplace(bytes, static_cast<int>(id)).second)
            bad("token " + in_quotes(key) + " appears twice");
        tok.token_bytes_[id] = bytes;
    }
    if (entries.size() != count)
        bad(std::to_string(entries.size()) + " tokens, expected GPT-2's " + std::to_string(count));
    for (int b = 0; b < 256; ++b) {
        const auto it = tok.bytes_to_id_.find(std::string(1, static_cast<char>(b)));
        if (it == tok.bytes_to_id_.end()) bad("no token for the single byte " + std::to_string(b));
        tok.byte_id_[b] = it->second;
    }
    return tok;
}

// vocab.bpe: "#version: 0.2", then one merge "left right" per line, highest priority first.
void Tokenizer::read_merges(std::string_view text, const std::string& merges_path) {
    merges_.clear();
    cache_.clear();
    int line_no = 0;
    size_t pos = 0;
    std::string left, right;
    for (std::string_view line; next_line(text, pos, line);) {
        ++line_no;
        if (line_no == 1 && line.substr(0, 1) == "#") continue;  // the version line
        if (line.empty()) continue;

        const auto bad = [&](const std::string& what) {
            throw Error("tokenizer file " + merges_path + ": line " + std::to_string(line_no) +
                        ": " + what);
        };
        const size_t space = line.find(' ');
        if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
            line.find(' ', space + 1) != std::string_view::npos)
            bad("expected two tokens separated by one space");
        if (!unmap_token(line.substr(0, space), left) || !unmap_token(line.substr(space + 1), right))
            bad("token not written in GPT-2's byte alphabet");
        const auto l = bytes_to_id_.find(left);
        const auto r = bytes_to_id_.find(right);
        const auto m = bytes_to_id_.find(left + right);
        if (l == bytes_to_id_.end() || r == bytes_to_id_.end() || m == bytes_to_id_.end())
            bad("merge of tokens that " + encoder_path_ + " does not have");

        // tiktoken ranks a pair by the id of the token it makes; vocab.bpe ranks it by its
        // line. The two agree only if merge number k makes token 256 + k (the 256
        // single bytes come first), so we insist on that, as tiktoken's own loader does.
        // (tiktoken would also merge two parts that spell a token without being its
        // listed merge, e.g. " " + "the"; BPE never puts such parts side by side on real
        // text, which the comparison with js-tiktoken in the tests keeps checking.)
        const int rank = static_cast<int>(merges_.size());
        if (m->second != 256 + rank)
            bad("merge number " + std::to_string(rank) + " makes token " + std::to_string(m->second) +
                ", expected " + std::to_string(256 + rank) + " (does it match encoder.json?)");
        if (!merges_.emplace(pair_key(l->second, r->second), Merge{rank, m->second}).second)
            bad("merge listed twice");
    }
    // Every token but the 256 bytes and <|endoftext|> must be made by exactly one merge.
    const size_t expected = token_bytes_.size() - 257;
    if (merges_.size() != expected)
        throw Error("tokenizer file " + merges_path + ": " + std::to_string(merges_.size()) +
                    " merges, expected " + std::to_string(expected) + " to match " + encoder_path_);
}

// ---------------------------------------------------------------------------------------
// Encoding

size_t last_safe_cut(std::string_view text, size_t from) {
    for (size_t p = text.size(); p-- > std::max<size_t>(from, 1);) {
        if (text[p] != ' ' && text[p] != '\n') continue;
        // The character that ends at p - 1, as piece_end() reads it: a well-formed one that
        // starts at most 3 bytes before, or else the byte alone (invalid, of class "other").
        size_t q = p - 1;
        while (q > 0 && p - q < 4 && is_cont(static_cast<unsigned char>(text[q]))) --q;
        const Char c = char_at(text, q);
        const CharClass before = q + size_t(c.len) == p ? c.cls : CharClass::kOther;
        if (before != CharClass::kSpace) return p;
    }
    return std::string_view::npos;
}

std::vector<int> Tokenizer::encode(std::string_view text) const {
    std::vector<int> ids;
    ids.reserve(text.size() / 4 + 1);  // English averages a bit over 4 bytes per token
    for (size_t pos = 0; pos < text.size();) {
        const size_t end = piece_end(text, pos);
        if (end - pos == 1) {
            ids.push_back(byte_id_[static_cast<unsigned char>(text[pos])]);
        } else {
            const std::vector<int> piece = encode_piece(text.substr(pos, end - pos));
            ids.insert(ids.end(), piece.begin(), piece.end());
        }
        pos = end;
    }
    return ids;
}

std::vector<int> Tokenizer::encode_piece(std::string_view piece) const {
    std::string key(piece);
    // A piece that is a token by itself is that token, without running the merges
    // (tiktoken does the same; the merges would give the same answer).
    if (const auto it = bytes_to_id_.find(key); it != bytes_to_id_.end()) return {it->second};
    if (const auto it = cache_.find(key); it != cache_.end()) return it->second;
    std::vector<int> ids = merge_bytes(piece);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), ids);
    return ids;
}

// The BPE merge loop. The textbook version rescans all pairs after every merge, which is
// quadratic in the piece length; a piece can be long (a run of digits or of spaces, a long
// word in a script without spaces), so we keep the candidate pairs in a priority queue.
// Ties in rank go to the leftmost pair, as in tiktoken's scan from the left.
std::vector<int> Tokenizer::merge_bytes(std::string_view piece) const {
    // The current parts form a linked list indexed by the byte offset where a part starts.
    // id[i] is the token of the part starting at i, or -1 once that part has been merged into
    // its left neighbour.
    const int n = static_cast<int>(piece.size());
    std::vector<int> id(n), next(n), prev(n);
    for (int i = 0; i < n; ++i) {
        id[i] = byte_id_[static_cast<unsigned char>(piece[i])];
        next[i] = i + 1;
        prev[i] = i - 1;
    }

    struct Candidate {
        int rank, left, right;  // merge rank; start offsets of the two parts
        int left_id, right_id;  // the parts' tokens when the candidate was queued
        int merged_id;
        bool operator>(const Candidate& o) const {
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
    const auto consider = [&](int left) {
        if (left < 0 || next[left] >= n) return;
        const int right = next[left];
        const auto it = merges_.find(pair_key(id[left], id[right]));
        if (it != merges_.end())
            queue.push({it->second.rank, left, right, id[left], id[right], it->second.id});
    };
    for (int i = 0; i + 1 < n; ++i) consider(i);

    while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        // A candidate is stale if either part has since merged with something else.
        if (id[c.left] != c.left_id || next[c.left] != c.right || id[c.right] != c.right_id) continue;
        id[c.left] = c.merged_id;
        id[c.right] = -1;
        next[c.left] = next[c.right];
        if (next[c.left] < n) prev[next[c.left]] = c.left;
        if (prev[c.left] >= 0) consider(prev[c.left]);
        consider(c.left);
    }

    std::vector<int> ids;
    for (int i = 0; i < n; i = next[i]) ids.push_back(id[i]);
    return ids;
}

// ---------------------------------------------------------------------------------------
// Decoding

namespace {
void check_id(int id, int vocab_size) {
    if (id < 0 || id >= vocab_size)
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                    std::to_string(vocab_size - 1) + ")");
}
}  // namespace

std::string Tokenizer::decode_token(int id) const {
    check_id(id, vocab_size());
    return token_bytes_[id];
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
    std::string out;
    for (const int id : ids) {
        check_id(id, vocab_size());
        out += token_bytes_[id];
    }
    return out;
}

}  // namespace gpt
