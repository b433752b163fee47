// A corpus read as a stream of documents, a piece at a time, for gpt_prepare: memory stays
// bounded whatever the corpus's size. Three kinds of input, in the order they are given:
//   - a file of the tagged Brown corpus: one document (small; its tags stripped, brown.h);
//   - a text file: one document, however large, read in pieces of about a megabyte;
//   - a JSON Lines file: one document per line, its text in a string field ("text" by default),
//     the form in which FineWeb-Edu, OpenWebText and most corpora are exported.
// "-" reads standard input (as text, or as JSON Lines with gpt_prepare --format jsonl).
// A long text is cut only where the tokenizer allows it (last_safe_cut, data/tokenizer.h).
#pragma once
#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace gpt {

struct CorpusInput {
    enum Kind { kBrownFile, kText, kJsonLines } kind;
    std::string path;  // "-": standard input
};

// A part of a document's text. A document is one piece or several in a row; the first has
// `starts_document`. `where` names it in messages ("file.jsonl:12").
struct Piece {
    std::string text;
    bool starts_document = false;
    std::string where;
};

class CorpusReader {
  public:
    // piece_bytes: about how long the pieces of a long text document are.
    CorpusReader(std::vector<CorpusInput> inputs, std::string text_field, size_t piece_bytes = size_t(1) << 20);
    ~CorpusReader();

    // The next piece in corpus order; false at the end. Throws gpt::Error with one line naming
    // the file (and the line of a JSON Lines file) for input it cannot read.
    bool next(Piece& piece);

    int64_t documents() const { return documents_; }  // started so far
    int64_t bytes_read() const { return bytes_read_; }

  private:
    bool open_next_input();
    bool next_text_piece(Piece& piece);
    bool next_json_line(Piece& piece);
    void read_block();  // appends up to piece_bytes_ of the input to pending_

    std::vector<CorpusInput> inputs_;
    std::string text_field_;
    size_t piece_bytes_;
    size_t next_input_ = 0;
    const CorpusInput* input_ = nullptr;  // the one being read
    std::unique_ptr<std::ifstream> file_;
    std::istream* in_ = nullptr;
    int64_t line_ = 0;            // of a JSON Lines input
    std::string pending_;         // input read but not yet handed out: from pending_at_ on
    size_t pending_at_ = 0;
    bool document_open_ = false;  // a text document has given its first piece
    bool input_done_ = false;
    int64_t documents_ = 0, bytes_read_ = 0;
};

// Whether a file starts like JSON Lines: after a UTF-8 byte order mark and white space, a JSON
// object that opens with a key on the first line ({"...). A pretty-printed JSON file or a text
// that opens with a brace does not. gpt_prepare reads a file not named .jsonl as one text
// document, and uses this to suggest --format jsonl.
bool starts_like_json_lines(const std::string& path);

}  // namespace gpt
