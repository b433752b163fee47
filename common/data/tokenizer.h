// GPT-2 byte-level BPE tokenizer (the `gpt2` encoding of tiktoken), encode and decode.
// Loads the two files OpenAI published with GPT-2: encoder.json (token string -> id) and
// vocab.bpe (the merge list, in priority order).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace gpt {

// Where a text may be cut so that encoding the two parts gives exactly the tokens of the whole:
// before a space or newline that follows a character the pre-tokenizer does not count as white
// space. Every piece that holds such a character ends before white space, and a piece that starts
// at white space is matched from there on, whatever came before. The position of the last such
// place in text[from, text.size()), or std::string_view::npos if there is none.
size_t last_safe_cut(std::string_view text, size_t from = 0);

class Tokenizer {
  public:
    static constexpr int kEndOfText = 50256;  // <|endoftext|>

    // Reads DIR/encoder.json and DIR/vocab.bpe; throws gpt::Error naming the file on failure.
    static Tokenizer load(const std::string& dir);
    // The two halves of load(), on the files' contents (`path` names the file in errors): for
    // the fuzzer (tests/fuzz), which feeds each its own hostile text. read_merges() replaces
    // the merge list.
    static Tokenizer from_encoder_json(std::string_view text, const std::string& path);
    void read_merges(std::string_view text, const std::string& path);

    // Ordinary text only: "<|endoftext|>" in the text is encoded as plain characters.
    std::vector<int> encode(std::string_view text) const;
    std::string decode(const std::vector<int>& ids) const;  // bytes; may end mid-UTF-8
    std::string decode_token(int id) const;                 // raw bytes of one token
    int vocab_size() const { return static_cast<int>(token_bytes_.size()); }

  private:
    // One line of vocab.bpe: the pair (left, right) merges into token `id`; lower `rank`
    // (earlier line) merges first.
    struct Merge {
        int rank;
        int id;
    };

    std::vector<int> encode_piece(std::string_view piece) const;
    std::vector<int> merge_bytes(std::string_view piece) const;  // BPE on one piece

    std::string encoder_path_;                           // where the vocabulary came from, for errors
    std::vector<std::string> token_bytes_;               // id -> raw bytes
    std::unordered_map<std::string, int> bytes_to_id_;   // raw bytes -> id (ordinary tokens)
    std::array<int, 256> byte_id_{};                     // byte value -> id of its 1-byte token
    std::unordered_map<uint64_t, Merge> merges_;         // (left id << 32 | right id) -> merge
    // Pieces already encoded: most words repeat, so this makes encode() fast on real text.
    // It is also why one Tokenizer must not encode() from two threads at once.
    mutable std::unordered_map<std::string, std::vector<int>> cache_;
};

}  // namespace gpt
